#!/usr/bin/env bash
# Create .venv (Python 3.11+) and install Planloop into it, editable, with the dev extra.
#
# Idempotent and cheap when nothing changed: pip runs only when pyproject.toml, the Python
# version or this script differ from what the stamp in .venv recorded, or when the install
# looks broken. pip's chatter goes to a log that is printed only when pip fails.
#
# Environment:
#   PYTHON  interpreter to build the venv with (default: the newest python3.1x >= 3.11 on PATH)
#   VENV    venv directory (default: .venv in the repository root)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

venv="${VENV:-.venv}"
stamp="$venv/.planloop-install-stamp"
log="$venv/.planloop-install.log"

say() { printf 'bootstrap: %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

# True when interpreter $1 runs and is Python 3.11 or newer.
is_py311() {
    "$1" -c 'import sys; raise SystemExit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

pick_python() {
    if [[ -n "${PYTHON:-}" ]]; then
        is_py311 "$PYTHON" || die "PYTHON=$PYTHON is not a Python 3.11+ interpreter"
        printf '%s\n' "$PYTHON"
        return
    fi
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && is_py311 "$candidate"; then
            printf '%s\n' "$candidate"
            return
        fi
    done
    die "Planloop needs Python 3.11 or newer; none found on PATH (set PYTHON=/path/to/python3.11)"
}

# A venv whose interpreter is missing, broken or too old (e.g. its base Python was removed)
# is rebuilt in place; `venv --clear` keeps the directory but drops its contents.
if ! is_py311 "$venv/bin/python"; then
    python="$(pick_python)"
    clear=()
    [[ -e "$venv" ]] && clear=(--clear)
    say "creating $venv with $("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    "$python" -m venv "${clear[@]}" "$venv" || die "could not create $venv with $python"
fi

# What the install depends on: the project metadata, the interpreter and this script.
want="$(
    {
        cat pyproject.toml
        "$venv/bin/python" -c 'import sys; print(sys.version)'
        cat "${BASH_SOURCE[0]}"
    } | "$venv/bin/python" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
)"
have="$(cat "$stamp" 2>/dev/null || true)"

if [[ "$want" == "$have" && -x "$venv/bin/planloop" && -x "$venv/bin/pytest" ]]; then
    say "$venv is up to date"
    exit 0
fi

say "installing planloop[dev] into $venv (log: $log)"
rm -f "$stamp"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
    -e '.[dev]' >"$log" 2>&1 </dev/null; then
    printf 'bootstrap: error: pip install failed; the end of %s:\n' "$log" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
printf '%s\n' "$want" >"$stamp"
say "installed"
