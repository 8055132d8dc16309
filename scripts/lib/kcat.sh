#!/usr/bin/env bash
# kcat with a librdkafka that can do SCRAM against Kafka 4.x.
#
# librdkafka before 2.6.1 repeats the client nonce in the SCRAM client-final message; Kafka 4.x (and
# Portcullis) check the nonce strictly, as RFC 5802 requires, and refuse the login. Debian 12 ships
# kcat 1.7.1 on librdkafka 2.0.2. The confluent-kafka wheel in the test venv bundles a current
# librdkafka with the same C ABI, so the same kcat binary can run on it through LD_LIBRARY_PATH.

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Prints the librdkafka version kcat runs on (with the current LD_LIBRARY_PATH).
kcat_librdkafka_version() {
  kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][0-9.]*\).*/\1/p' | head -n 1
}

version_ge() { # version_ge A B: A >= B
  [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$2" ]]
}

# Sets KCAT_LD_LIBRARY_PATH to a directory to prepend to LD_LIBRARY_PATH for SCRAM-capable kcat,
# or to the empty string when the system librdkafka is new enough. Needs the venv (venv.sh).
kcat_prepare_scram() {
  ensure_kcat
  local system
  system=$(kcat_librdkafka_version)
  if [[ -n "$system" ]] && version_ge "$system" 2.6.1; then
    KCAT_LD_LIBRARY_PATH=
    return 0
  fi
  local lib
  lib=$(find "$PORTCULLIS_VENV"/lib/python3*/site-packages/confluent_kafka.libs -name 'librdkafka*.so*' 2>/dev/null | head -n 1)
  [[ -n "$lib" ]] || die "kcat's librdkafka $system cannot do SCRAM with Kafka 4.x, and no newer librdkafka was found in $PORTCULLIS_VENV"
  KCAT_LD_LIBRARY_PATH="$PORTCULLIS_CACHE/librdkafka"
  mkdir -p "$KCAT_LD_LIBRARY_PATH"
  ln -sfn "$lib" "$KCAT_LD_LIBRARY_PATH/librdkafka.so.1"
  log "system kcat uses librdkafka $system (SCRAM broken with Kafka 4.x); using $(LD_LIBRARY_PATH=$KCAT_LD_LIBRARY_PATH kcat_librdkafka_version) from the venv"
}

# kcat_scram ARGS...: kcat on the SCRAM-capable librdkafka.
kcat_scram() {
  if [[ -n "${KCAT_LD_LIBRARY_PATH:-}" ]]; then
    LD_LIBRARY_PATH="$KCAT_LD_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" kcat "$@"
  else
    kcat "$@"
  fi
}
