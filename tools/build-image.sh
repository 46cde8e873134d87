#!/usr/bin/env bash
# Builds warden's Docker sandbox image with no registry: debootstrap of a minimal Debian
# with python3 (the same release as this host, so the warden binary that the backend
# bind-mounts as the in-container launcher finds the glibc it was built against), then
# `docker import`. Optional extra Debian packages, and Python packages from a local wheel
# directory (no index is contacted). The result is cached by content: the image carries a
# label with the hash of everything that went into it, and a build whose inputs have not
# changed is skipped.
#
# --from IMAGE builds on an image this script built instead of a new debootstrap: only
# the wheels and the launcher are added, as one layer (docker create, cp, commit), in
# seconds. --launcher FILE copies a Linux warden binary into the image at
# /opt/warden/warden, labelled with its launcher protocol and version: the launcher the
# Docker backend uses when it cannot bind its own binary (a server on macOS or Windows,
# a remote DOCKER_HOST, or SANDBOX_LAUNCHER=image). It must run on this machine.
# --podman-user USER copies the image into USER's rootless Podman storage (offline:
# docker save, podman load as that user), unless it holds that image already, and makes
# one container of it in the user namespace the backend asks for (keep-id), which Podman
# prepares once per image.
#
#   tools/build-image.sh [--tag warden-sandbox:latest] [--packages "python3-numpy ..."]
#                        [--requirements FILE --wheels DIR] [--launcher FILE]
#                        [--from IMAGE] [--suite bookworm] [--mirror URL] [--force]
#                        [--podman-user USER]
set -euo pipefail
umask 022

tag=warden-sandbox:latest
packages=""
requirements=""
wheels=""
suite=""
mirror="${WARDEN_DEBIAN_MIRROR:-}"
force=0
from=""
launcher=""
podman_user=""
cache="${WARDEN_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warden-image}"

die() { echo "build-image: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --packages) packages="$2"; shift 2 ;;
    --requirements) requirements="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --suite) suite="$2"; shift 2 ;;
    --mirror) mirror="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --from) from="$2"; shift 2 ;;
    --launcher) launcher="$2"; shift 2 ;;
    --podman-user) podman_user="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
command -v docker >/dev/null || die "the docker CLI is missing (apt-get install docker.io)"
if [ -n "$podman_user" ]; then
  command -v podman >/dev/null || die "--podman-user: podman is missing (apt-get install podman uidmap)"
  getent passwd "$podman_user" >/dev/null || die "--podman-user: no user $podman_user"
fi

# Runs "$@" as the Podman user, in its home, with its runtime directory.
as_podman_user() {
  local uid home
  uid="$(id -u "$podman_user")"
  home="$(getent passwd "$podman_user" | cut -d: -f6)"
  (cd "$home" && setpriv --reuid="$podman_user" --regid="$podman_user" --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" USER="$podman_user" \
    LOGNAME="$podman_user" XDG_RUNTIME_DIR="/run/user/$uid" "$@")
}

# The image built (or found up to date): copied to the Podman user when asked; done.
finish() {
  if [ -n "$podman_user" ]; then
    local want have
    want="$(docker image inspect -f '{{ .Id }}' "$tag" | sed 's/^sha256://')"
    have="$(as_podman_user podman image inspect -f '{{ .Id }}' "$tag" 2>/dev/null || true)"
    if [ "$want" != "$have" ]; then
      docker save "$tag" | as_podman_user podman load -q >/dev/null
      as_podman_user podman run --rm --userns=keep-id --network none "$tag" true
      echo "build-image: $tag copied into $podman_user's rootless Podman"
    fi
  fi
  exit 0
}
if [ -z "$from" ]; then
  [ "$(id -u)" = 0 ] || die "debootstrap needs root; run this as root"
  command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
fi
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd, or set DOCKER_HOST)"
if [ -n "$requirements" ] || [ -n "$wheels" ]; then
  [ -f "$requirements" ] || die "--requirements must name a file"
  [ -d "$wheels" ] || die "--wheels must name a directory of .whl files"
fi
if [ -n "$from" ]; then
  [ -z "$packages" ] || die "--packages needs a new debootstrap; it cannot be used with --from"
  docker image inspect "$from" >/dev/null 2>&1 || die "--from: no image $from here"
  [ -n "$requirements" ] || [ -n "$launcher" ] || die "--from adds wheels or a launcher: give --requirements/--wheels or --launcher"
fi
launcher_protocol=""
launcher_version=""
if [ -n "$launcher" ]; then
  [ -f "$launcher" ] && [ -x "$launcher" ] || die "--launcher must name an executable warden binary"
  # "<protocol> <version>": the labels the server checks before it uses this launcher.
  read -r launcher_protocol launcher_version < <("$launcher" __launcher-protocol 2>/dev/null || true)
  [ -n "$launcher_protocol" ] && [ -n "$launcher_version" ] \
    || die "$launcher does not answer __launcher-protocol: it must be a Linux warden binary built with the docker feature, for this machine's architecture"
fi

# Copies pip's packages (pure or for the image's Python) from the wheel directory into
# $2 (no index is contacted). pip runs from a throwaway venv of this machine's python3
# (ensurepip: no download); binary wheels must match the image's Python version $1,
# which --python-version enforces.
install_wheels() {
  python3 -m venv "$work/pip" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$work/pip/bin/python" -m pip install -q --disable-pip-version-check --no-index \
    --find-links "$wheels" --only-binary=:all: --python-version "$1" \
    --target "$2" -r "$requirements" || die "pip could not install $requirements from $wheels (above)"
}
launcher_labels=()
if [ -n "$launcher" ]; then
  launcher_labels=(--change "LABEL dev.warden.launcher-protocol=$launcher_protocol"
                   --change "LABEL dev.warden.launcher-version=$launcher_version")
fi

# shellcheck disable=SC1091
[ -n "$suite" ] || suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[ -n "$suite" ] || die "cannot tell this host's Debian release; pass --suite"
if [ -z "$mirror" ]; then
  mirror="$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)"
  [ -n "$mirror" ] || mirror="$(sed -n 's/^deb \(http[^ ]*debian\) .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)"
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi
arch="$(dpkg --print-architecture)"

# The content key: this script, the release, the packages, the requirements and every
# wheel's bytes.
key="$( {
  cat "$0"; echo "$suite $arch $packages"
  [ -z "$from" ] || docker image inspect -f '{{ .Id }}' "$from"
  [ -z "$requirements" ] || cat "$requirements"
  [ -z "$wheels" ] || find "$wheels" -maxdepth 1 -name '*.whl' -type f -print0 | sort -z | xargs -0r sha256sum
  [ -z "$launcher" ] || sha256sum < "$launcher"
} | sha256sum | cut -c1-32)"
if [ "$force" = 0 ] && [ "$(docker image inspect -f '{{ index .Config.Labels "dev.warden.image-key" }}' "$tag" 2>/dev/null)" = "$key" ]; then
  echo "build-image: $tag is up to date ($key)"
  finish
fi

work="$(mktemp -d /var/tmp/warden-image.XXXXXX)"
trap 'rm -rf "$work"' EXIT

if [ -n "$from" ]; then
  # One layer on an image this script built: its Python's version and path are its labels.
  pyver="$(docker image inspect -f '{{ index .Config.Labels "dev.warden.python-version" }}' "$from")"
  [ -n "$pyver" ] || die "$from has no dev.warden.python-version label: build it with this script first"
  mkdir -p "$work/layer"
  if [ -n "$requirements" ]; then
    install_wheels "$pyver" "$work/layer/usr/local/lib/python$pyver/dist-packages"
  fi
  if [ -n "$launcher" ]; then
    install -D -m 0755 "$launcher" "$work/layer/opt/warden/warden"
  fi
  container="$(docker create "$from")"
  # `|| true`: under set -e a failing command in an EXIT trap ends the script with its
  # status, after the image was built.
  trap 'docker rm -f "$container" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  tar --numeric-owner --owner=0 --group=0 -C "$work/layer" -c . | docker cp - "$container:/"
  docker commit --change "LABEL dev.warden.image-key=$key" "${launcher_labels[@]}" \
    "$container" "$tag" >/dev/null
  echo "build-image: built $tag ($key) on $from: Python $pyver${requirements:+, wheels from $wheels}${launcher:+, launcher protocol $launcher_protocol ($launcher_version)}"
  finish
fi
root="$work/root"
mkdir -p "$cache/debs"
echo "build-image: debootstrap $suite ($arch) with python3 from $mirror" >&2
debootstrap --variant=minbase --arch="$arch" --include=python3 \
  --cache-dir="$cache/debs" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
if [ -n "$packages" ]; then
  # apt inside the new tree, without recommended packages (debootstrap's own resolver
  # would pull compilers and headers in), reusing the same package cache.
  echo "build-image: apt-get install $packages" >&2
  mkdir -p "$cache/archives/partial"
  mount --bind "$cache/archives" "$root/var/cache/apt/archives"
  # Already unmounted on success: `|| true`, or umount's status (32) would become the
  # script's under set -e, after the image was built.
  trap 'umount "$root/var/cache/apt/archives" 2>/dev/null || true; rm -rf "$work"' EXIT
  # shellcheck disable=SC2086
  { chroot "$root" apt-get update -qq && DEBIAN_FRONTEND=noninteractive chroot "$root" \
      apt-get install -y -qq --no-install-recommends $packages; } >"$work/apt.log" 2>&1 \
    || { tail -20 "$work/apt.log" >&2; die "apt-get install in the image failed (log above)"; }
  umount "$root/var/cache/apt/archives"
fi

pyver="$(chroot "$root" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ -n "$requirements" ]; then
  install_wheels "$pyver" "$root/usr/local/lib/python$pyver/dist-packages"
fi

# Nothing the sandbox does not need: package caches, documentation, set-id bits.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +
mkdir -p "$root/workspace" "$root/opt/warden"
[ -z "$launcher" ] || install -m 0755 "$launcher" "$root/opt/warden/warden"

python_bin="$(chroot "$root" /usr/bin/python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')"
tar --numeric-owner -C "$root" -c . | docker import \
  --change "LABEL dev.warden.image-key=$key" \
  --change "LABEL dev.warden.suite=$suite" \
  --change "LABEL dev.warden.python=$python_bin" \
  --change "LABEL dev.warden.python-version=$pyver" \
  --change "ENV LANG=C.UTF-8" \
  --change 'CMD ["/usr/bin/python3"]' \
  "${launcher_labels[@]}" \
  - "$tag" >/dev/null
echo "build-image: built $tag ($key): Debian $suite, Python $pyver at $python_bin"
finish
