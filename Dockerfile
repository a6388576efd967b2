# gpu-slice-extender container image.
#
#   docker build -t gpu-slice-extender:0.1.0 .
#
# No container engine runs on the development machines (only the client is installed), so this
# file is checked by tests/deploy_manifests_test.sh (same setup and build commands as the
# scripts, runtime packages exist in bookworm) but not built there; build it on a host with an
# engine.
#
# Build stage: exactly the project's own install and build steps (scripts/setup.sh, then the
# Release build of the one target), so the image and the developers' builds use the same
# Debian packages. setup.sh also installs the test tools; they stay in this stage.
FROM debian:bookworm AS build
WORKDIR /src
# Only what CMake reads (extender/CMakeLists.txt embeds examples/demo-cluster.json). Copying
# the whole tree would carry developers' build trees, whose CMakeCache.txt points elsewhere and
# breaks "cmake -B build". A .dockerignore with build*/ and **/node_modules would also keep
# them out of the build context that docker sends.
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY scripts/ scripts/
COPY state/ state/
COPY kube/ kube/
COPY scoring/ scoring/
COPY extender/ extender/
COPY tools/ tools/
COPY testsupport/ testsupport/
COPY perf/ perf/
COPY tests/ tests/
COPY examples/ examples/
# The npm projects under tests/ only validate files; without them setup.sh skips `npm ci`.
RUN rm -rf tests/deploy tests/grafana
RUN bash scripts/setup.sh
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)" --target gpu-slice-extender

# Runtime stage: the binary and the shared libraries it links, nothing else (no compiler, no
# shell tools beyond the slim base; /bin/sleep is used by the preStop hook).
FROM debian:bookworm-slim
# Package names as in Debian bookworm (apt-cache policy): Abseil 20220623, cpp-httplib 0.11
# (pulls in zlib and brotli), prometheus-cpp core 1.0, yaml-cpp 0.7, OpenSSL 3.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libabsl20220623 libcpp-httplib0.11 libprometheus-cpp-core1.0 libyaml-cpp0.7 libssl3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/gpu-slice-extender /usr/local/bin/gpu-slice-extender
# The same uid/gid the Deployment runs as (runAsUser 65532); no home, no shell login needed.
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/gpu-slice-extender"]
