#!/bin/bash
# Make sure a Docker engine answers, for `make kafka-image` and `make test-container`.
# As root on Debian it installs what is missing (docker.io, debootstrap) and starts dockerd in the
# background (its log in $DOCKERD_LOG); otherwise it says what to install and start, and fails.
set -euo pipefail
log=${DOCKERD_LOG:-/tmp/safeconsumer-dockerd.log}

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

missing=()
command -v docker >/dev/null || missing+=(docker.io)
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
        echo "installing ${missing[*]} (Debian packages)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "${missing[@]}" >/dev/null \
            || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
    else
        echo "the container path needs ${missing[*]}: as root, apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

if answers; then
    exit 0
fi
if [ -n "${DOCKER_HOST:-}" ] || [ "$(id -u)" != 0 ]; then
    echo "no Docker engine answers at ${DOCKER_HOST:-unix:///var/run/docker.sock}: start one (as root: dockerd &)" >&2
    exit 1
fi
echo "starting dockerd (log: $log)" >&2
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 60); do
    answers && exit 0
    sleep 1
done
echo "dockerd did not answer within 60 s; its log ($log) ends:" >&2
tail -n 20 "$log" >&2
exit 1
