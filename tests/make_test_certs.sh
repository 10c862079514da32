#!/usr/bin/env bash
# Writes a throw-away PKI and tokens for the security tests into DIR:
#   ca.pem ca.key              the test CA
#   server.pem server.key      CN=localhost, SAN localhost and 127.0.0.1
#   client.pem client.key      CN=worker-1, signed by the CA
#   rogue-ca.pem rogue.pem rogue.key   a client certificate of another CA
#   tokens.txt                 the servers' tokens file (jobs "sec" and "zero")
#   worker.token admin.token other-job.token zero-worker.token zero-admin.token
#                              one client token each (random, 32 hex chars)
# Usage: make_test_certs.sh DIR
set -euo pipefail
D="$1"
mkdir -p "$D"
cd "$D"
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ca() {  # name, subject
  ec "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 2 -subj "$2" -out "$1.pem" 2>/dev/null
}
leaf() {  # name, subject, CA name, extensions
  ec "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial \
    -days 2 -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "/CN=zeroshard test CA"
ca rogue-ca "/CN=another CA"
leaf server "/CN=localhost" ca \
  "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf client "/CN=worker-1" ca "extendedKeyUsage=clientAuth"
leaf rogue "/CN=worker-1" rogue-ca "extendedKeyUsage=clientAuth"
tok() { openssl rand -hex 16; }
for t in worker admin other-job zero-worker zero-admin; do tok >"$t.token"; done
cat >tokens.txt <<TOKENS
# token job role name
$(cat worker.token) sec worker sec-workers
$(cat admin.token) sec admin sec-admin
$(cat other-job.token) other worker other-workers
$(cat zero-worker.token) zero worker zero-workers
$(cat zero-admin.token) zero admin zero-admin
TOKENS
chmod 600 ./*.key ./*.token tokens.txt
