#!/usr/bin/env bash
# Prints the path of a CPython 3.13 for the newest JAX (which needs Python >=
# 3.12): the one the environment names, one built here before, or one the
# machine has (on the PATH, or a pyenv version); where there is none, it builds
# CPython 3.13 from Debian's source package (trixie) once, into a cache
# directory (about 3 minutes on 2 cores), since Debian's source package is the
# one CPython 3.13 the package registries here serve.
#
#   tools/build-python.sh            # prints e.g. ~/.cache/irshard/cpython-3.13/bin/python3.13
#
# Environment:
#   IRSHARD_PYTHON_LATEST  an existing python3.12+/3.13 to use instead (nothing is built)
#   IRSHARD_CACHE          the cache directory (default: ${XDG_CACHE_HOME:-~/.cache}/irshard)
#   IRSHARD_BUILD_PYTHON   1: build one even where the machine has a CPython 3.13
#
# The build is installed into a staging directory and moved into place only when
# it is complete, so an interrupted build is started over, never half reused. Apt
# is pointed at a private list directory for the source package: the system's
# apt sources are left as they are. Installing the build dependencies needs
# root (CI and these machines run as root); without it they must be present.
set -euo pipefail

version=3.13
cache=${IRSHARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irshard}
prefix=$cache/cpython-$version
python=$prefix/bin/python$version

log() { echo "build-python: $*" >&2; }

if [ -n "${IRSHARD_PYTHON_LATEST:-}" ]; then
  "$IRSHARD_PYTHON_LATEST" -c 'import sys; assert sys.version_info >= (3, 12), sys.version' >&2
  echo "$IRSHARD_PYTHON_LATEST"
  exit 0
fi
# Whether $1 is a whole CPython 3.13: the modules pip, venv and the tests
# need were built into it.
usable() {
  [ -x "$1" ] && "$1" -c 'import sys, ssl, sqlite3, lzma, bz2, ctypes, zlib, ensurepip, venv
assert sys.version_info[:2] == (3, 13) and sys.implementation.name == "cpython"' 2>/dev/null
}
if usable "$python"; then
  echo "$python"
  exit 0
fi
if [ "${IRSHARD_BUILD_PYTHON:-0}" != 1 ]; then
  pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
  for found in "$(command -v python$version || true)" $(ls -d "$pyenv_root"/versions/$version*/bin/python$version 2>/dev/null | sort -rV); do
    if [ -n "$found" ] && usable "$found"; then
      log "using $found ($("$found" -c 'import platform; print(platform.python_version())'))"
      echo "$found"
      exit 0
    fi
  done
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

deps="build-essential dpkg-dev pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev libgdbm-dev libreadline-dev libncurses-dev"
missing=$(for d in $deps; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$d" 2>/dev/null)" = installed ] || echo "$d"
done)
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing build dependencies: $(echo $missing); install them as root"; exit 1
  fi
  log "installing build dependencies: $(echo $missing)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Debian trixie's source package, through a private apt configuration.
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat >"$apt_dir/sources.list" <<'EOF'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
EOF
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
log "fetching Debian's python$version source package"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq "python$version" >/dev/null)
# Upstream CPython as Debian ships it (the .orig tarball, without Debian's
# patches, which disable ensurepip and change the install scheme).
(cd "$work" && dpkg-source --no-check --skip-patches -x python${version}_*.dsc src >/dev/null)

log "configuring and building CPython $(cd "$work/src" && dpkg-parsechangelog -S Version) (several minutes)"
cd "$work/src"
./configure --prefix="$prefix" --with-ensurepip=install --disable-test-modules >"$work/configure.log" 2>&1 \
  || { tail -n 40 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
make install DESTDIR="$work/dest" >"$work/install.log" 2>&1 \
  || { tail -n 40 "$work/install.log" >&2; exit 1; }
rm -rf "$prefix"
mv "$work/dest$prefix" "$prefix"
"$python" -c 'import ssl, sqlite3, lzma, bz2, ctypes, zlib' || { rm -rf "$prefix"; exit 1; }
log "built $python"
echo "$python"
