# syntax=docker/dockerfile:1.7
# One multi-stage build for every tally component. Each component is its own target:
#   docker build --target collector -t tally/collector .
# Binaries are static (CGO_ENABLED=0: no component outside the all-in-one links the embedded
# ClickHouse engine), the runtime base is Alpine (busybox's wget runs the healthchecks, its sh
# and date the nightly schedule), and every process runs as the unprivileged user tally (uid
# 10001). The target list must match the cmd directories, and the images stay static, non-root
# and pinned: deploy/compose_test.go checks it.

ARG GO_IMAGE=golang:1.26.8-alpine3.22
ARG BASE_IMAGE=alpine:3.22.2

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
# The whole workspace (go.work needs every module it lists); the module cache is a build cache
# mount, so a source change does not download the modules again.
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out && \
    for c in collector aggregator batchjob topk sink; do \
      go build -ldflags='-s -w' -o /out/$c ./$c/cmd/$c || exit 1; \
    done

FROM ${BASE_IMAGE} AS base
RUN addgroup -S -g 10001 tally && adduser -S -D -H -u 10001 -G tally tally && \
    mkdir -p /etc/tally /var/lib/tally && chown tally:tally /var/lib/tally
USER 10001:10001
WORKDIR /var/lib/tally

FROM base AS collector
COPY --from=build /out/collector /usr/local/bin/collector
EXPOSE 8080 9080
ENTRYPOINT ["/usr/local/bin/collector"]

FROM base AS aggregator
COPY --from=build /out/aggregator /usr/local/bin/aggregator
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/aggregator"]

FROM base AS topk
COPY --from=build /out/topk /usr/local/bin/topk
EXPOSE 8082
ENTRYPOINT ["/usr/local/bin/topk"]

FROM base AS sink
COPY --from=build /out/sink /usr/local/bin/sink
EXPOSE 8083
ENTRYPOINT ["/usr/local/bin/sink"]

# The batch jobs run once per invocation (a Kubernetes CronJob runs this target).
FROM base AS batchjob
COPY --from=build /out/batchjob /usr/local/bin/batchjob
ENTRYPOINT ["/usr/local/bin/batchjob"]

# The batch jobs on a schedule for docker compose: a shell loop that runs them every night at
# 03:00 UTC (deploy/cron/nightly.sh). Kubernetes runs the batchjob target from CronJobs instead.
FROM batchjob AS batchjob-cron
COPY --chmod=0755 deploy/cron/nightly.sh /usr/local/bin/nightly
ENTRYPOINT ["/usr/local/bin/nightly"]
