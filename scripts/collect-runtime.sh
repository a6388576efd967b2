#!/usr/bin/env bash
# Collects a minimal runtime root filesystem for the container images' last stage: each given
# executable (into /usr/local/bin), exactly the shared libraries `ldd` resolves for it and the
# dynamic loader (at their own paths), the CA bundle, a passwd/group naming the non-root user
# the manifests run as (65532), and an empty /tmp. No shell, no package manager, no compiler.
#
# Usage: scripts/collect-runtime.sh ROOT EXECUTABLE... [--extra PATH...]
#   --extra PATH  further executables copied at their own path with their libraries (the
#                 Deployment's preStop hook runs /bin/sleep)
# Fails when ldd cannot resolve a library ("not found"): the image would not start.
set -euo pipefail
root="$1"; shift
bins=() extras=()
mode=bin
for a in "$@"; do
  if [[ "$a" == --extra ]]; then mode=extra; continue; fi
  if [[ "$mode" == bin ]]; then bins+=("$a"); else extras+=("$a"); fi
done
((${#bins[@]})) || { echo "collect-runtime: no executable given" >&2; exit 2; }

copy_libs() {  # the loader and every library ldd resolves for $1, at the same path under $root
  local exe="$1" out
  out=$(ldd "$exe")
  if grep -q 'not found' <<<"$out"; then
    echo "collect-runtime: $exe: unresolved libraries:" >&2; grep 'not found' <<<"$out" >&2; exit 1
  fi
  # "libx.so => /path (addr)" and the loader's own "/lib64/ld-linux-x86-64.so.2 (addr)".
  awk '/=> \//{print $3} /^[[:space:]]*\/[^ ]+ \(/{print $1}' <<<"$out" | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
for b in "${bins[@]}"; do
  install -m 0755 "$b" "$root/usr/local/bin/$(basename "$b")"
  copy_libs "$b"
done
for e in "${extras[@]+"${extras[@]}"}"; do
  mkdir -p "$root$(dirname "$e")"
  cp -L "$e" "$root$e"
  copy_libs "$e"
done
# TLS to the API server from a kubeconfig (in-cluster uses the mounted service account CA).
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
# glibc resolves host names through files then DNS without needing any NSS module file (both
# are built into libc since 2.34); say so explicitly instead of relying on its defaults.
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
echo "collect-runtime: $(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1) in $root" >&2
