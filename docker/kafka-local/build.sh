#!/bin/bash
# Build a Kafka image without a registry, from what is on hand: a Debian root filesystem made by
# debootstrap from Debian's packages (openjdk-17-jre-headless), the Apache Kafka jars the local
# launcher resolves from Maven Central (the same version), and ./run, which honours Apache's
# apache/kafka KAFKA_* environment contract. Needs root (debootstrap) and a running Docker engine.
#
#   [KAFKA_VERSION=4.3.1] docker/kafka-local/build.sh [TAG]      (default safeconsumer/kafka:<version>-local)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
# KAFKA_VERSION=4.3.1 builds another supported release (default: the launcher's newest).
version=${KAFKA_VERSION:-$("$python" -c 'from safeconsumer.testing import KAFKA_VERSION; print(KAFKA_VERSION)')}
libs=$("$python" -c "from safeconsumer.testing import kafka_lib_dir; print(kafka_lib_dir('$version'))")
tag=${1:-safeconsumer/kafka:$version-local}
cache=${SAFECONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safeconsumer}
base=$cache/rootfs-bookworm-jre17
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# An image built from the same inputs (entrypoint, configs, jars) is kept as it is.
inputs=$( (cat "$here/run" "$here/default.properties" "$here/log4j2.properties"; cd "$libs" && ls -l --time-style=+ ./*.jar) \
    | sha256sum | cut -c1-16)
if [ "$(docker image inspect --format '{{ index .Config.Labels "safeconsumer.inputs" }}' "$tag" 2>/dev/null)" = "$inputs" ]; then
    echo "$tag"
    exit 0
fi

if [ ! -e "$base/.complete" ]; then
    rm -rf "$base"
    debootstrap --variant=minbase --include=openjdk-17-jre-headless,bash bookworm "$base" "$mirror"
    rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/lib/apt/lists/* "$base"/usr/share/doc "$base"/usr/share/man
    touch "$base/.complete"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
cp -al "$base" "$root"   # hard links: the cached base stays untouched, only new files are added
rm -f "$root/.complete"
mkdir -p "$root/opt/kafka/libs" "$root/opt/kafka/config" "$root/etc/kafka/docker"
cp "$libs"/*.jar "$root/opt/kafka/libs/"
cp "$here/run" "$root/etc/kafka/docker/run"
cp "$here/default.properties" "$here/log4j2.properties" "$root/opt/kafka/config/"

tar -C "$root" -cf - . | docker import \
    --change 'ENTRYPOINT ["/etc/kafka/docker/run"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'EXPOSE 9092' \
    --change "LABEL org.opencontainers.image.title=safeconsumer-kafka-local org.opencontainers.image.version=$version safeconsumer.inputs=$inputs" \
    - "$tag" > /dev/null
echo "$tag"
