# shellcheck shell=bash
# need_packages PACKAGE...: installs the Debian packages that are missing
# (as root with apt-get, otherwise with sudo; without sudo it names them).
# Sourced by scripts/stores.sh (which sets DIR and log).

need_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "missing packages: ${missing[*]}; as root run: apt-get install ${missing[*]}"
      return 1
    fi
    as_root=(sudo --preserve-env=DEBIAN_FRONTEND)
  fi
  log "installing ${missing[*]}${as_root:+ (with sudo)}"
  if [ ! -f "$DIR/.apt-updated" ]; then
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get update -qq
    touch "$DIR/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
