#!/usr/bin/env bash
# Writes a throw-away TLS identity and tokens file for section A's tests
# into DIR (the openssl CLI, as tests/make_test_certs.sh):
#   ca.pem ca.key          a test CA
#   server.pem server.key  CN=localhost, SAN localhost and 127.0.0.1
#   client.key             another key (matches no certificate here)
#   tokens.txt             one worker token of job "a"
# Keys and tokens are 0600. Usage: section_a_certs.sh DIR
set -euo pipefail
D="$1"
mkdir -p "$D"
cd "$D"
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ec ca.key
openssl req -x509 -new -key ca.key -sha256 -days 2 -subj "/CN=section A CA" -out ca.pem 2>/dev/null
ec server.key
openssl req -new -key server.key -subj "/CN=localhost" -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
  -days 2 -sha256 -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext
ec client.key
echo "$(openssl rand -hex 16) a worker a-workers" >tokens.txt
chmod 600 ./*.key tokens.txt
