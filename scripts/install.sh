#!/usr/bin/env bash
# Set up rvfedprs in a project virtual environment (.venv/), as a stock Debian/Ubuntu user can:
#   1. find a Python >= 3.11 (PYTHON=/path/to/python to choose one; else the first of python3,
#      python3.13, python3.12, python3.11 that is >= 3.11);
#   2. create .venv/ with it, or reuse the one there;
#   3. install the package and its dev extras with the pins of constraints.txt (skipped when
#      nothing changed since the last install: a stamp in .venv/ records what was installed);
#   4. install Debian's plink2, plink1.9, bcftools and tabix only when they are missing (as root,
#      or with a password-less sudo); otherwise name the packages to install and exit 1.
# Afterwards: `source .venv/bin/activate` puts rvfedprs, snakemake, pytest and flwr on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
say() { printf 'install.sh: %s\n' "$*" >&2; }

# --- 1. a Python >= 3.11 -------------------------------------------------------------------------
python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }
python=""
candidates=${PYTHON:-python3 python3.13 python3.12 python3.11}  # PYTHON=...: that one only
for candidate in $candidates; do
    if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
        python=$(command -v "$candidate")
        break
    fi
done
if [ -z "$python" ]; then
    say "no Python >= 3.11 found (tried: $candidates)."
    say "On Debian/Ubuntu: sudo apt-get install python3 python3-venv   (Debian 12 and Ubuntu 24.04 ship 3.11 / 3.12)"
    exit 1
fi

# --- 2. the virtual environment (reused when it works) ---------------------------------------------
if [ -x "$venv/bin/python" ] && python_ok "$venv/bin/python" && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    say "reusing $venv ($("$venv/bin/python" --version))"
else
    if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        say "$python cannot create a virtual environment: the venv module or ensurepip is missing."
        say "On Debian/Ubuntu: sudo apt-get install python3-venv   (or python${version}-venv)"
        exit 1
    fi
    say "creating $venv with $python ($("$python" --version))"
    rm -rf "$venv"
    "$python" -m venv "$venv"
fi

# --- 3. the package, with the pins ---------------------------------------------------------------
# The stamp names what the environment was built from; an unchanged checkout skips pip entirely.
stamp="$venv/.rvfedprs-install"
wanted=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && "$venv/bin/python" -c 'import rvfedprs' >/dev/null 2>&1; then
    say "Python packages up to date (pyproject.toml and constraints.txt unchanged)"
else
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -c constraints.txt -e ".[dev]"
    echo "$wanted" >"$stamp"
fi

# --- 4. the Debian tools, only when missing --------------------------------------------------------
missing=()
for tool in plink2:plink2 plink1.9:plink1.9 bcftools:bcftools tabix:tabix bgzip:tabix; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        sudo="sudo -n"
    else
        say "missing Debian packages: ${packages}"
        say "ask an administrator to run: apt-get install -y ${packages}"
        say "(the Python environment in $venv is ready; the genotype tools are not)"
        exit 1
    fi
    say "installing Debian packages: ${packages}"
    $sudo apt-get update -qq
    # shellcheck disable=SC2086
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages
fi
say "ready: source $venv/bin/activate"
