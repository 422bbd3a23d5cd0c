#!/usr/bin/env bash
# Installs the Debian packages embtier needs to build, test and run, if any
# is missing. Safe to run again: it installs nothing when all are present.
# Set ET_DEPS_EXTRA to add packages (CI adds the sanitizer runtime and
# Open MPI for the MPI tests).
# The Python package (python/) uses Debian's numpy, torch and pytest, for
# Debian's interpreter, /usr/bin/python3; python3-dev for its small C
# extension (python/embtier/_fast.c); python3-pip, -setuptools, -wheel and
# -venv to pip-install it offline (make check-pip).
set -eu
pkgs="build-essential pkg-config liburing-dev libjemalloc-dev libxxhash-dev
libcmocka-dev libopenblas-dev python3 python3-dev python3-numpy
python3-torch python3-pytest python3-pip python3-setuptools python3-wheel
python3-venv ${ET_DEPS_EXTRA:-}"
missing=""
for p in $pkgs; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
