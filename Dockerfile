# gpu-slice-extender container images, built offline by scripts/image.sh (podman/buildah):
#
#   bash scripts/image.sh            # builds gpu-slice-extender:<git commit> (see the script)
#   podman build --target extender -t gpu-slice-extender:dev .
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
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGSE_BUILD_TESTS=OFF && cmake --build build -j"$(nproc)" --target gpu-slice-extender
# The runtime root: the binary, the shared libraries ldd resolves for it, the CA bundle, a
# passwd entry for uid 65532, and /bin/sleep for the Deployment's preStop hook.
RUN bash scripts/collect-runtime.sh /runtime/extender build/bin/gpu-slice-extender --extra /bin/sleep

# Runtime image of the extender: nothing but what the binary loads (no shell, no package
# manager, no compiler). The uid/gid are the Deployment's runAsUser/runAsGroup.
FROM scratch AS extender
COPY --from=build /runtime/extender/ /
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/gpu-slice-extender"]
