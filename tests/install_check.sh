#!/bin/sh
# The install kit: `make install` into a scratch PREFIX and DESTDIR, every file where it belongs (the docs among
# them), the example config valid with its ledger under /var/lib/otpd, `otpd --version` answering, and the
# systemd unit checked by systemd-analyze where the machine has it (the unit's paths follow PREFIX, so the check
# sees the installed binaries).
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s install PREFIX="$tmp/usr" >/dev/null
make -s install PREFIX=/usr DESTDIR="$tmp/dest" >/dev/null
for f in bin/otpd bin/otpctl lib/systemd/system/otpd.service share/otpd/otpd.json.example \
         share/doc/otpd/LICENSE share/doc/otpd/README.md share/doc/otpd/docs/architecture.md \
         share/doc/otpd/docs/config.md share/doc/otpd/docs/operations.md share/doc/otpd/docs/contributing.md \
         share/doc/otpd/docs/rules.md share/doc/otpd/docs/providers.md share/doc/otpd/docs/openapi.yaml \
         share/doc/otpd/docs/prometheus/otpd.rules.yml share/doc/otpd/docs/grafana/otpd.json; do
    test -f "$tmp/usr/$f" || { echo "install: $f missing"; exit 1; }
    test -f "$tmp/dest/usr/$f" || { echo "install with DESTDIR: $f missing"; exit 1; }
done
grep -q "ExecStart=/usr/bin/otpd -c /etc/otpd/otpd.json" "$tmp/dest/usr/lib/systemd/system/otpd.service" ||
    { echo "install: the unit's paths do not follow PREFIX"; exit 1; }
# The example config is valid as shipped, and keeps its ledger where the unit lets otpd write (StateDirectory).
"$tmp/usr/bin/otpd" --check -c "$tmp/usr/share/otpd/otpd.json.example" >/dev/null ||
    { echo "install: the example config does not pass otpd --check"; exit 1; }
grep -q '"path": "/var/lib/otpd/' "$tmp/usr/share/otpd/otpd.json.example" ||
    { echo "install: the example config's ledger is not under /var/lib/otpd"; exit 1; }
"$tmp/usr/bin/otpd" --version | grep -Eq '^otpd [^ ]+$' || { echo "otpd --version: no version"; exit 1; }
if command -v systemd-analyze >/dev/null 2>&1; then
    systemd-analyze verify "$tmp/usr/lib/systemd/system/otpd.service"
    echo "install: ok (systemd-analyze verify passed)"
else
    echo "install: ok (no systemd-analyze here: the unit was not verified)"
fi
