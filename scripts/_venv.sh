# Sourced by the scripts: make .venv (once) and install the project into it.
# Usage: . scripts/_venv.sh EXTRAS   (e.g. "dev,all" or "")
# "dev" is not an extra but the pinned dependency group of tools (pyproject.toml,
# [dependency-groups]); the other names are the package's extras (s3, gcs, azure, all, testing).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
wanted=${1:-}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
extras=""
group=""
for name in ${wanted//,/ }; do
  if [ "$name" = dev ]; then group=dev; else extras="${extras:+$extras,}$name"; fi
done
stamp="$venv/.installed-$(printf '%s' "$wanted" | tr ',' '-')"
# Installed already if a stamp newer than pyproject.toml names every wanted extra (a script that
# wants "dev" after scripts/test installed "dev,all" installs nothing).
covered() {
  local have name found
  for found in "$venv"/.installed-*; do
    [ -f "$found" ] && [ ! "$root/pyproject.toml" -nt "$found" ] || continue
    have=" $(basename "$found" | sed 's/^\.installed-//' | tr '-' ' ') "
    for name in ${wanted//,/ }; do
      case "$have" in *" $name "*) ;; *) continue 2 ;; esac
    done
    return 0
  done
  return 1
}
if ! covered; then
  # pip warns about this machine's extra index locations on every package: keep the log readable.
  quiet() { "$@" 2> >(grep -v '^WARNING: Location' >&2); }
  spec="$root"
  [ -n "$extras" ] && spec="$root[$extras]"
  args=(-e "$spec")
  [ -n "$group" ] && args+=(--group "$root/pyproject.toml:$group")
  # uv installs the same pins as pip (the same `pip freeze`) in a tenth of the time (12 s vs
  # 166 s for dev,all at load 3: pip's minutes were most of the CI run's set-up). uv reads no
  # pip.conf: PIP_FIND_LINKS is passed on. Where uv can't be had or fails, pip does it all.
  links=()
  for dir in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$dir"); done
  if ! { quiet "$venv/bin/python" -m pip install --quiet uv &&
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "${links[@]}" "${args[@]}" \
      'pip>=25.1'; }  # the pip the other scripts use (scripts/build-image), as pip's path leaves it
  then
    # Dependency groups need pip 25.1 or newer.
    quiet "$venv/bin/python" -m pip install --quiet --upgrade 'pip>=25.1'
    quiet "$venv/bin/python" -m pip install --quiet "${args[@]}"
  fi
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
