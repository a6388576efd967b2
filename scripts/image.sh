#!/usr/bin/env bash
# Builds the container images from the repository's Dockerfile, offline: no registry is needed.
# The Debian base images that the Dockerfile's FROM lines name are made here with debootstrap
# from the same Debian archive that apt uses on this machine, cleaned like the official images,
# and imported under those names; then podman builds each runtime target.
#
# Usage: scripts/image.sh [--push=REGISTRY]   e.g. --push=registry.example.com/platform
#   Images: localhost/gpu-slice-extender:TAG (and localhost/gpu-slice-agent:TAG once the
#   Dockerfile has an `agent` target). TAG is the git commit (12 hex digits), with "-dirty"
#   when tracked files differ from it; layer timestamps are the commit's time, so the same
#   commit builds the same layers. Each is also tagged with the project version of
#   CMakeLists.txt, the tag deploy/'s kustomizations name. Prints each image's name and size.
#   --push tags each image REGISTRY/NAME:TAG and pushes it (podman push; credentials from
#   `podman login`).
# Environment: GSE_IMAGE_WORK (default build-image/) holds the podman configuration and the
# debootstrap tree.
set -euo pipefail
cd "$(dirname "$0")/.."
push=""
for arg in "$@"; do
  case "$arg" in
    --push=*) push="${arg#--push=}" ;;
    *) echo "image: unknown argument $arg (want --push=REGISTRY)" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh --image

work="${GSE_IMAGE_WORK:-$PWD/build-image}"
mkdir -p "$work"
# podman on these machines: crun cannot run in hybrid cgroup mode, and podman's default
# ulimits exceed what a VM without CAP_SYS_RESOURCE may set; use runc and the hard limits
# (nproc also capped by pid_max, above which runc's setrlimit is refused).
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu); pid_max=$(cat /proc/sys/kernel/pid_max)
[[ "$nproc" == unlimited || "$nproc" -gt "$pid_max" ]] && nproc=$pid_max
cat >"$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$work/containers.conf"

# ---- base images: debian:bookworm (build stage) from debootstrap ---------------------------
base=docker.io/library/debian:bookworm
if ! podman image exists "$base"; then
  # Only the source files that exist: a machine with deb822 sources alone has no sources.list,
  # and a grep of a missing file would end the script here (set -e, pipefail) without a word.
  sources=()
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    if [[ -f "$f" ]]; then sources+=("$f"); fi
  done
  mirror=""
  if ((${#sources[@]})); then
    # deb822 "URIs: URL" or one-line "deb [options] URL suite ...": the first http(s) field.
    mirror=$(awk '/^URIs:/ || /^deb / {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; break}}' \
               "${sources[@]}" | grep -v security | head -1 || true)
  fi
  [[ -n "$mirror" ]] || { echo "image: no Debian mirror in this machine's apt sources" >&2; exit 1; }
  rootfs="$work/bookworm-rootfs"
  rm -rf "$rootfs"
  echo "image: debootstrap bookworm from $mirror" >&2
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # As the official image: no package caches or lists, no docs, man pages or locales, and apt
  # configured to keep it so in every layer built on top.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
APT
  printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
    >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-excludes"
  tar --numeric-owner -C "$rootfs" -cf "$work/bookworm.tar" .
  podman import "$work/bookworm.tar" "$base" >/dev/null
  rm -rf "$rootfs" "$work/bookworm.tar"
fi

# ---- the images --------------------------------------------------------------------------
version=$(sed -nE 's/^project\([^)]* VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
tag=$(git rev-parse --short=12 HEAD)
[[ -z "$(git status --porcelain --untracked-files=no)" ]] || tag+="-dirty"
epoch=$(git log -1 --format=%ct)
targets=(extender)
grep -qE '^FROM .* AS agent$' Dockerfile && targets+=(agent)
for target in "${targets[@]}"; do
  name="gpu-slice-$target"
  echo "image: building $name:$tag" >&2
  podman build --quiet --target "$target" --timestamp "$epoch" -t "localhost/$name:$tag" -f Dockerfile . >/dev/null
  podman tag "localhost/$name:$tag" "localhost/$name:$version"
  podman image inspect --format "{{.Size}}" "localhost/$name:$tag" |
    awk -v n="localhost/$name:$tag" '{printf "%s %.1f MB\n", n, $1 / 1e6}'
  if [[ -n "$push" ]]; then
    for t in "$tag" "$version"; do
      podman tag "localhost/$name:$tag" "$push/$name:$t"
      podman push "$push/$name:$t"
    done
  fi
done
