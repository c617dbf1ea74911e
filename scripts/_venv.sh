# Sourced by the scripts: make .venv (once) and install the project into it.
# Usage: . scripts/_venv.sh EXTRAS   (e.g. "dev,all" or "")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
extras=${1:-}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip 2> >(grep -v '^WARNING: Location' >&2)
fi
stamp="$venv/.installed-$(printf '%s' "$extras" | tr ',' '-')"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  spec="$root"
  [ -n "$extras" ] && spec="$root[$extras]"
  # pip warns about this machine's extra index locations on every package: keep the log readable.
  "$venv/bin/python" -m pip install --quiet -e "$spec" 2> >(grep -v '^WARNING: Location' >&2)
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
