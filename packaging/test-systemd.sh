#!/usr/bin/env bash
# The package check's last step (run by packaging/test-package.sh): the packaged unit, run by a
# real systemd, does what the README's "Install on an appliance" section says, with every one of
# its sandboxing settings in force. systemd-analyze only reads the unit; this starts it.
#
# systemd boots as PID 1 of new PID, mount and cgroup namespaces (`unshare`), the host's file
# systems seen through overlays: the package's files are added to /usr and /etc, and whatever
# systemd or the service writes to /etc or /var lands in this check's temporary directory. Its own
# /run and /etc/systemd/system are empty tmpfs, so none of the host's enabled units start, and the
# units that would act on the host's kernel, devices, clock, swap or /tmp are masked. A cgroup
# namespace keeps systemd's cgroups below this check's own. The network is the host's: the service
# listens on a free loopback port.
#
#   usage: packaging/test-systemd.sh PACKAGE.deb      (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
. packaging/lib.sh

fail() {
    echo "test-systemd: FAIL: $*" >&2
    exit 1
}
ok() { echo "test-systemd: ok: $*"; }

deb=${1:?usage: test-systemd.sh PACKAGE.deb}
[ "$(id -u)" = 0 ] || fail "must run as root (it boots systemd in namespaces of its own)"
for cmd in unshare nsenter systemd-sysusers dpkg-deb curl; do
    command -v "$cmd" >/dev/null || fail "$cmd is missing"
done
[ -x /lib/systemd/systemd ] || fail "/lib/systemd/systemd is missing (apt-get install systemd)"
# A second systemd beside the host's own would share its cgroup tree; this check is for build
# hosts and CI machines that do not boot with systemd (containers, VMs like the CI's).
if [ -d /run/systemd/system ]; then
    echo "test-systemd: SKIPPED: this host runs systemd itself; run the check in a container or VM"
    exit 0
fi

work=$(mktemp -d /tmp/parasol-systemd.XXXXXX)
unshare_pid=
# The cgroups systemd makes (units' slices and scopes) stay behind, empty, when it is killed.
cgroup_dirs() {
    find /sys/fs/cgroup -mindepth 1 -maxdepth 8 -type d \
        \( -name '*.slice' -o -name '*.scope' -o -name '*.service' -o -name '*.socket' \) | sort
}
cleanup() {
    # unshare --kill-child: systemd, and with it the whole namespace, goes when unshare goes.
    if [ -n "$unshare_pid" ]; then
        kill -KILL "$unshare_pid" 2>/dev/null || true
        wait "$unshare_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            cgroup_dirs | comm -13 "$work/cgroups.before" - | sort -r >"$work/cgroups.new"
            [ -s "$work/cgroups.new" ] || break
            xargs -r rmdir <"$work/cgroups.new" 2>/dev/null || sleep 0.1
        done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# --- the file systems the namespace will see ---------------------------------------------------
mkdir -p "$work/pkg" "$work/root/etc" "$work/var" "$work/usr.work" "$work/etc.work" "$work/var.work"
dpkg-deb -x "$deb" "$work/pkg"
cp -a "$work/pkg/etc/." "$work/root/etc/"
# The service binds a free port (the packaged default, 127.0.0.1:8443, may be taken here); the
# rest of the packaged options stay.
sed -i 's/--listen 127\.0\.0\.1:8443/--listen 127.0.0.1:0/' "$work/root/etc/default/parasol"
grep -q -- '--listen 127.0.0.1:0' "$work/root/etc/default/parasol" ||
    fail "/etc/default/parasol no longer sets --listen 127.0.0.1:8443"
# What the postinst does on a real install: systemd-sysusers with the packaged file.
for f in passwd group shadow gshadow; do
    [ -e "/etc/$f" ] && cp -p "/etc/$f" "$work/root/etc/$f"
done
systemd-sysusers --root="$work/root" "$work/pkg/usr/lib/sysusers.d/parasol.conf" >/dev/null 2>&1 ||
    fail "systemd-sysusers could not create the parasol user"
grep -q '^parasol:' "$work/root/etc/passwd" || fail "no parasol user after systemd-sysusers"

cat >"$work/boot.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
mount --make-rprivate /
mount -t overlay overlay -o lowerdir=/usr,upperdir=$work/pkg/usr,workdir=$work/usr.work /usr
mount -t overlay overlay -o lowerdir=/etc,upperdir=$work/root/etc,workdir=$work/etc.work /etc
mount -t overlay overlay -o lowerdir=/var,upperdir=$work/var,workdir=$work/var.work /var
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /etc/systemd/system
# The cgroup hierarchies mounted afresh inside the new cgroup namespace: their root is the cgroup
# this check runs in, so systemd's slices and scopes are made below it, not beside the host's.
mount -t tmpfs -o mode=0755 tmpfs /sys/fs/cgroup
while IFS=: read -r _ controllers _; do
    case "\$controllers" in
        "") dir=unified type=cgroup2 opts= ;;
        name=*) dir=\${controllers#name=} type=cgroup opts=none,\$controllers ;;
        *) dir=\$controllers type=cgroup opts=\$controllers ;;
    esac
    mkdir -p "/sys/fs/cgroup/\$dir"
    mount -t "\$type" \${opts:+-o "\$opts"} cgroup "/sys/fs/cgroup/\$dir"
done </proc/self/cgroup
mask() { ln -sf /dev/null "/etc/systemd/system/\$1"; }
# Everything the early boot targets pull in, but the journal.
for target in sysinit sockets timers paths local-fs basic; do
    for unit in /usr/lib/systemd/system/\$target.target.wants/*; do
        [ -e "\$unit" ] || continue
        case "\${unit##*/}" in
            systemd-journald.service | systemd-journald.socket | systemd-journald-dev-log.socket) ;;
            *) mask "\${unit##*/}" ;;
        esac
    done
done
for unit in swap.target tmp.mount getty.target remote-fs.target systemd-remount-fs.service \
    systemd-fsck-root.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-timesyncd.service systemd-networkd.service systemd-resolved.service \
    systemd-logind.service dbus.service modprobe@.service; do
    mask "\$unit"
done
exec /lib/systemd/systemd --system --unit=basic.target
EOF
chmod +x "$work/boot.sh"

# --- boot ---------------------------------------------------------------------------------------
cgroup_dirs >"$work/cgroups.before"
unshare --pid --fork --kill-child --mount --mount-proc --cgroup "$work/boot.sh" \
    >"$work/boot.log" 2>&1 &
unshare_pid=$!
sd_pid=$(first_child "$unshare_pid")
[ -n "$sd_pid" ] || { cat "$work/boot.log" >&2; fail "systemd did not start in the namespace"; }
inside() { nsenter -t "$sd_pid" -m -p "$@"; }
state=
for _ in $(seq 1 300); do
    state=$(inside systemctl is-system-running 2>/dev/null || true)
    case "$state" in running | degraded) break ;; esac
    kill -0 "$unshare_pid" 2>/dev/null || { cat "$work/boot.log" >&2; fail "systemd exited"; }
    sleep 0.1
done
case "$state" in
    running) ;;
    degraded) inside systemctl --failed --no-pager >&2 || true ;;
    *) cat "$work/boot.log" >&2; fail "systemd did not finish booting (state: $state)" ;;
esac
version=$(inside systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
ok "systemd $version booted in a namespace ($state)"

# --- the service --------------------------------------------------------------------------------
journal() { inside journalctl -u parasol.service -o cat --no-pager 2>/dev/null; }
main_pid() { inside systemctl show -p MainPID --value parasol.service; }
# Waits for the Nth "parasol ready" line (one per start) and prints its URL.
wait_ready() {
    local url=
    for _ in $(seq 1 300); do
        url=$(journal | sed -n 's/.*parasol ready: serving \(https:[^ ]*\).*/\1/p' | sed -n "${1}p")
        [ -n "$url" ] && break
        sleep 0.1
    done
    if [ -z "$url" ]; then
        journal >&2
        inside systemctl status parasol.service --no-pager >&2 || true
        fail "no ready line"
    fi
    echo "$url"
}

inside systemctl start parasol.service || { journal >&2; fail "systemctl start parasol"; }
url=$(wait_ready 1)
[ "$(inside systemctl is-active parasol.service)" = active ] || fail "parasol.service is not active"
pid=$(main_pid)
uid=$(inside awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = "$(inside id -u parasol)" ] || fail "the service runs as uid $uid, not as user parasol"
state_dir=$(inside stat -c %U:%a /var/lib/parasol)
[ "$state_dir" = parasol:700 ] || fail "/var/lib/parasol is $state_dir, not parasol:700 (StateDirectory=, and the store makes it private)"
ok "parasol.service started as user parasol on $url; /var/lib/parasol parasol:700"

# The README's provisioning command, as root, on the live server's database.
created=$(inside /usr/bin/parasol org create --data-dir /var/lib/parasol --name Acme) ||
    fail "parasol org create on the live database"
key=$(sed -n 's/.*"customerKey": *"\([^"]*\)".*/\1/p' <<<"$created")
[ -n "$key" ] || fail "org create printed no customerKey: $created"
event() { # NAME -> one event for dstDomain NAME
    printf '{"deviceId":"ba6a59f4-e692-4724-ba36-c28132c761de","deviceVersion":"13.7a",'
    printf '"eventTime":"2026-11-22T10:00:00.0Z","alertTime":"2026-11-22T10:00:01Z",'
    printf '"dstDomain":"%s","dstUrl":"http://%s/x",' "$1" "$1"
    printf '"protocolVersion":"1.0a","providerName":"Security Platform"}'
}
post() { # BODY-FILE -> HTTP status
    curl -sk --max-time 30 -o "$work/post.json" -w '%{http_code}' \
        -H 'content-type: application/json' --data-binary "@$1" "$url/1.0/events?customerKey=$key"
}
event systemd-check.example >"$work/one.json"
status=$(post "$work/one.json")
[ "$status" = 202 ] || fail "POST /1.0/events answered $status: $(cat "$work/post.json")"
# A batch over 32 KiB: validated and written by the bulk threads, which lower their own priority.
{
    printf '['
    for i in $(seq 1 400); do
        [ "$i" = 1 ] || printf ','
        event "host$i.systemd-check.example"
    done
    printf ']'
} >"$work/batch.json"
status=$(post "$work/batch.json")
batch_bytes=$(stat -c %s "$work/batch.json")
[ "$status" = 202 ] || fail "POST of a $batch_bytes-byte batch answered $status: $(cat "$work/post.json")"
listed=$(curl -sk --max-time 10 "$url/1.0/domains?customerKey=$key&limit=200&page=3")
grep -q '"host400.systemd-check.example"' <<<"$listed" ||
    fail "the batch's domains are not listed: $listed"
ok "provisioned as root while serving; POST /1.0/events 202 (one event; 400 in $batch_bytes bytes); listed"

# setpriority passes the unit's system-call filter: the background threads run at nice 5.
nice=$(inside sh -c 'for t in /proc/'"$pid"'/task/*; do
    if [ "$(cat "$t/comm")" = parasol-checkpo ]; then awk "{ print \$19 }" "$t/stat"; fi
done')
[ "$nice" = 5 ] || fail "the checkpointer thread runs at nice '$nice', not 5 (setpriority refused?)"
ok "background threads at nice 5 (SystemCallFilter=setpriority)"

# sched_setscheduler passes it too: the writer thread runs under SCHED_BATCH (policy 3, field 41).
policy=$(inside sh -c 'for t in /proc/'"$pid"'/task/*; do
    if [ "$(cat "$t/comm")" = parasol-writer ]; then awk "{ print \$41 }" "$t/stat"; fi
done')
[ "$policy" = 3 ] || fail "the writer thread runs under policy '$policy', not SCHED_BATCH (3)"
ok "the writer under SCHED_BATCH (SystemCallFilter=sched_setscheduler)"

inside systemctl reload parasol.service || fail "systemctl reload parasol"
for _ in $(seq 1 100); do
    journal | grep -q 'reputation data reloaded' && break
    sleep 0.1
done
journal | grep -q 'reputation data reloaded' || fail "no reload after systemctl reload (ExecReload=)"
ok "systemctl reload: reputation data reloaded"

backup=$(inside /usr/bin/parasol backup --data-dir /var/lib/parasol --output /var/backups/parasol-check.db) ||
    fail "parasol backup while the service runs"
grep -q '"schemaVersion"' <<<"$backup" || fail "backup printed $backup"
ok "online backup of the live database as root"

# A crash: Restart=on-failure brings it back, with the data.
inside kill -KILL "$pid"
for _ in $(seq 1 100); do
    new=$(main_pid)
    [ "$new" != 0 ] && [ "$new" != "$pid" ] && break
    sleep 0.1
done
[ "$new" != 0 ] && [ "$new" != "$pid" ] || fail "not restarted after SIGKILL (Restart=on-failure)"
url=$(wait_ready 2)
[ "$(inside systemctl show -p NRestarts --value parasol.service)" = 1 ] || fail "NRestarts is not 1"
curl -sk --max-time 10 "$url/1.0/domains?customerKey=$key" | grep -q '"systemd-check.example"' ||
    fail "the listed domain is gone after the restart"
ok "restarted after SIGKILL (Restart=on-failure); the domain list survived"

inside systemctl stop parasol.service || fail "systemctl stop parasol"
[ "$(inside systemctl show -p ActiveState --value parasol.service)" = inactive ] ||
    fail "parasol.service is $(inside systemctl show -p ActiveState --value parasol.service) after stop"
journal | grep -q '\[INFO\] stopped$' || { journal >&2; fail "no clean stop in the journal"; }
journal | grep -q 'Deactivated successfully' || { journal >&2; fail "systemd saw no clean exit"; }
# The service's own lines only (systemd's about the SIGKILL above are warnings by design).
warnings=$(inside journalctl _SYSTEMD_UNIT=parasol.service -p warning -o cat --no-pager 2>/dev/null || true)
[ -z "$warnings" ] || fail "the service logged warnings or errors: $warnings"
ok "systemctl stop: stopped cleanly (SIGTERM), nothing logged at warning or above"

# Listening on every address: the self-signed certificate must name the machine's addresses,
# which the server reads from the kernel over netlink (RestrictAddressFamilies= allows AF_NETLINK
# for this); without them it would log a warning and name loopback only.
inside sed -i 's/--listen 127\.0\.0\.1:0/--listen 0.0.0.0:0/' /etc/default/parasol
inside systemctl start parasol.service || { journal >&2; fail "systemctl start parasol (0.0.0.0)"; }
wait_ready 3 >/dev/null
warnings=$(inside journalctl _SYSTEMD_UNIT=parasol.service -p warning -o cat --no-pager 2>/dev/null |
    grep -v "certificate" || true)
[ -z "$warnings" ] || fail "listening on 0.0.0.0, the service logged: $warnings"
sans=$(inside cat /var/lib/parasol/tls/cert.pem | openssl x509 -noout -ext subjectAltName)
addr=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$' || true)
if [ -n "$addr" ]; then
    grep -q "IP Address:$addr\b" <<<"$sans" || fail "the certificate does not name $addr: $sans"
fi
inside systemctl stop parasol.service || fail "systemctl stop parasol (0.0.0.0)"
ok "listening on 0.0.0.0 under the unit, the certificate names the machine's addresses${addr:+ ($addr)}"
