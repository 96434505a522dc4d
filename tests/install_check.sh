#!/bin/sh
# The install kit: `make install` into a scratch PREFIX and DESTDIR, every file where it belongs, `otpd --version`
# answering, and the systemd unit checked by systemd-analyze where the machine has it (the unit's paths follow
# PREFIX, so the check sees the installed binaries).
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s install PREFIX="$tmp/usr" >/dev/null
make -s install PREFIX=/usr DESTDIR="$tmp/dest" >/dev/null
for f in bin/otpd bin/otpctl lib/systemd/system/otpd.service share/otpd/otpd.json.example \
         share/doc/otpd/LICENSE share/doc/otpd/README.md; do
    test -f "$tmp/usr/$f" || { echo "install: $f missing"; exit 1; }
    test -f "$tmp/dest/usr/$f" || { echo "install with DESTDIR: $f missing"; exit 1; }
done
grep -q "ExecStart=/usr/bin/otpd -c /etc/otpd/otpd.json" "$tmp/dest/usr/lib/systemd/system/otpd.service" ||
    { echo "install: the unit's paths do not follow PREFIX"; exit 1; }
"$tmp/usr/bin/otpd" --version | grep -Eq '^otpd [^ ]+$' || { echo "otpd --version: no version"; exit 1; }
if command -v systemd-analyze >/dev/null 2>&1; then
    systemd-analyze verify "$tmp/usr/lib/systemd/system/otpd.service"
    echo "install: ok (systemd-analyze verify passed)"
else
    echo "install: ok (no systemd-analyze here: the unit was not verified)"
fi
