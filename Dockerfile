# gpu-slice-extender container images, built offline by scripts/image.sh (podman/buildah):
#
#   bash scripts/image.sh            # builds gpu-slice-extender and gpu-slice-agent:<git commit>
#   podman build --target extender -t gpu-slice-extender:dev .
#   podman build --target agent -t gpu-slice-agent:dev .
#
# Build stage: exactly the project's own install and build steps (scripts/setup.sh, then the
# Release build of the binaries), so the image and the developers' builds use the same Debian
# packages.
FROM debian:bookworm AS build
WORKDIR /src
# Packages first, from the one file that names them: source edits then reuse this layer.
COPY scripts/setup.sh scripts/
RUN bash scripts/setup.sh --build-only
# Only what CMake reads without tests (extender/CMakeLists.txt embeds examples/
# demo-cluster.json). Copying the whole tree would carry developers' build trees, whose
# CMakeCache.txt points elsewhere and breaks "cmake -B build" (.dockerignore keeps them out of
# the build context too), and would rebuild the image for every edit of a test.
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY scripts/ scripts/
COPY state/ state/
COPY kube/ kube/
COPY scoring/ scoring/
COPY extender/ extender/
COPY agent/ agent/
COPY tools/ tools/
COPY examples/ examples/
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGSE_BUILD_TESTS=OFF && cmake --build build -j"$(nproc)" --target gpu-slice-extender gpu-slice-agent
# The runtime roots: the binary, the shared libraries ldd resolves for it, the CA bundle, a
# passwd entry for uid 65532, and for the extender /bin/sleep (the Deployment's preStop hook).
RUN bash scripts/collect-runtime.sh /runtime/extender build/bin/gpu-slice-extender --extra /bin/sleep
RUN bash scripts/collect-runtime.sh /runtime/agent build/bin/gpu-slice-agent

# Runtime image of the extender: nothing but what the binary loads (no shell, no package
# manager, no compiler). The uid/gid are the Deployment's runAsUser/runAsGroup.
FROM scratch AS extender
COPY --from=build /runtime/extender/ /
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/gpu-slice-extender"]

# Runtime image of the node agent (deploy/agent/, docs/agent.md), built the same way. NVML is
# not in the image: the agent dlopen()s libnvidia-ml.so.1 from the host driver, which the NVIDIA
# container runtime mounts (the DaemonSet's NVIDIA_VISIBLE_DEVICES=all,
# NVIDIA_DRIVER_CAPABILITIES=utility). The image's default user is the unprivileged one; the
# DaemonSet runs it as uid 0 without any capability, because only root can use kubelet's
# device-plugin and pod-resources sockets (deploy/agent/daemonset.yaml says why).
FROM scratch AS agent
COPY --from=build /runtime/agent/ /
USER 65532:65532
EXPOSE 8890
ENTRYPOINT ["/usr/local/bin/gpu-slice-agent"]
