#!/usr/bin/env bash
# Install what a fresh machine lacks: Debian's plink2/plink1.9/bcftools/tabix, then the package
# and its dev extras with the pins in constraints.txt (torch pinned to the local CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in plink2:plink2 plink1.9:plink1.9 bcftools:bcftools tabix:tabix bgzip:tabix; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    # shellcheck disable=SC2046
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(printf '%s\n' "${missing[@]}" | sort -u)
fi

python3 -m pip install -q -c constraints.txt -e ".[dev]"
