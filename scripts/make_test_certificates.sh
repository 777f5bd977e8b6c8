#!/usr/bin/env bash
# Make TEST credentials for a Flower deployment of rvfedprs (see docs/DEPLOYMENT.md):
#   OUT/ca.crt, OUT/ca.key           a self-signed certificate authority
#   OUT/server.pem, OUT/server.key   the SuperLink's TLS certificate (signed by the CA) with
#                                    subjectAltName for localhost, 127.0.0.1, ::1 and HOSTS
#   OUT/keys/<site>, <site>.pub      per-SuperNode EC P-384 key pairs (OpenSSH format) for
#                                    SuperNode authentication, one per SITE
# Usage: scripts/make_test_certificates.sh OUT [--host NAME]... [--site NAME]...
# For testing only: production certificates come from your institution's CA.
set -euo pipefail

usage() { echo "usage: $0 OUT [--host NAME]... [--site NAME]..." >&2; exit 2; }
[[ $# -ge 1 ]] || usage
out=$1; shift
hosts=(); sites=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --host) [[ $# -ge 2 ]] || usage; hosts+=("$2"); shift 2 ;;
    --site) [[ $# -ge 2 ]] || usage; sites+=("$2"); shift 2 ;;
    *) usage ;;
  esac
done
command -v openssl >/dev/null || { echo "$0: openssl not found" >&2; exit 1; }
mkdir -p "$out/keys"
cd "$out"

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for h in "${hosts[@]}"; do
  if [[ $h =~ ^[0-9.]+$ ]]; then san+=",IP:$h"; else san+=",DNS:$h"; fi
done

openssl genrsa -out ca.key 4096 2>/dev/null
openssl req -x509 -new -nodes -key ca.key -sha256 -days 365 \
  -subj "/CN=rvfedprs test CA" -out ca.crt
openssl genrsa -out server.key 4096 2>/dev/null
openssl req -new -key server.key -subj "/CN=rvfedprs SuperLink" -out server.csr
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$san" > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out server.pem -days 365 -sha256 -extfile server.ext 2>/dev/null
rm -f server.csr server.ext ca.srl
chmod 600 ca.key server.key

for site in "${sites[@]}"; do
  [[ $site =~ ^[A-Za-z0-9._-]+$ ]] || { echo "$0: bad site name '$site'" >&2; exit 2; }
  rm -f "keys/$site" "keys/$site.pub"
  if command -v ssh-keygen >/dev/null; then
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "$site" -f "keys/$site"
  else  # openssl only: PEM private key; convert the public key to OpenSSH format elsewhere
    openssl ecparam -name secp384r1 -genkey -noout -out "keys/$site"
    openssl ec -in "keys/$site" -pubout -out "keys/$site.pub.pem" 2>/dev/null
  fi
done
echo "wrote $(pwd): ca.crt server.pem server.key${sites:+ keys/ for ${sites[*]}}"
