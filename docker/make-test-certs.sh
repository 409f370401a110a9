#!/bin/sh
# A throwaway CA and a broker certificate for the SASL_SSL example (compose.sasl_ssl.yaml).
# For tests only: the keys are not protected. Nothing here is committed; run it once:
#   docker/make-test-certs.sh docker/certs
# Writes DIR/ca.pem (give it to clients: ssl.ca.location) and DIR/broker.pem (the broker's
# certificate and key, one PEM keystore: ssl.keystore.type=PEM).
set -eu
dir=${1:?usage: make-test-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
    -subj "/CN=rebalanced test CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=broker/O=rebalanced example" -keyout broker-key.pem -out broker.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,DNS:broker,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
    > broker.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 365 \
    -extfile broker.ext -out broker-cert.pem 2>/dev/null
cat broker-cert.pem broker-key.pem > broker.pem
# The container runs as uid 10001: the keystore must be readable by it.
chmod 0644 broker.pem ca.pem
rm -f broker.csr broker.ext broker-cert.pem broker-key.pem ca.srl
echo "wrote $dir/ca.pem and $dir/broker.pem"
