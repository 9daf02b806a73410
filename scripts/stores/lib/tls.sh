# shellcheck shell=bash
# Throw-away certificates for the stores served over TLS.
# Sourced by scripts/stores.sh.

# tls_ca DIR CN: a throw-away certificate authority, DIR/ca.crt and DIR/ca.key.
tls_ca() {
  mkdir -p "$1"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1/ca.key" -out "$1/ca.crt" \
    -days 30 -subj "/CN=$2" >/dev/null 2>&1
}

# tls_cert DIR NAME CN SAN: DIR/NAME.crt and DIR/NAME.key, signed by DIR's CA,
# for the subject CN and the subjectAltName SAN (rustls checks only the SAN).
tls_cert() {
  local dir=$1 name=$2
  openssl req -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "/CN=$3" >/dev/null 2>&1
  printf 'subjectAltName=%s\n' "$4" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$name.crt" -days 30 -extfile "$dir/$name.ext" >/dev/null 2>&1
}
