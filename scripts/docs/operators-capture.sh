#!/bin/bash
# Regenerates docs/operators.md from real runs: starts davinci-mockd in /run/davinci (so it
# needs root, a free /run/davinci, a free /tmp/davinci-1000 and setpriv), runs clients and
# davinci-smi, captures their output and fills docs/operators.md.in. Build first:
#   cargo build -p davinci-smi -p davinci-mockd -p davinci-tests -p davinci-workload \
#       -p davinci-exporter -p davinci-device-plugin --bins --examples
# and have Debian's prometheus and curl installed.
# Usage: scripts/docs/operators-capture.sh   (from the repository root)
set -u
ROOT=$(pwd)
B=$(realpath "${CARGO_TARGET_DIR:-target}")/debug
WORK=$(mktemp -d)
cd "$WORK"
mkdir -p out
export PATH=$B:$PATH
D=/run/davinci
rm -rf $D
cap() { # name, command...
  local name=$1; shift
  { echo "\$ $*"; "$@"; echo "[exit status $?]"; } > out/$name.txt 2>&1
}
$B/davinci-mockd --help > out/mockd-help.txt
$B/davinci-smi --help > out/smi-help.txt
$B/davinci-smi info --help > out/smi-info-help.txt
$B/davinci-smi set --help > out/smi-set-help.txt
U="setpriv --reuid 1000 --regid 1000 --clear-groups"
cap nodev davinci-smi info
cap nodevuser $U davinci-smi info
cap nonode davinci-workload --device /dev/davinci0
# The main job's checks, before any device is involved.
cap wl-streams davinci-workload --streams 1000
cap wl-memory davinci-workload --memory-mib 1
cap wl-zero davinci-workload --tasks 0
cap wl-json env DAVINCI_DEVICE=mock:/run/davinci/davinci0.sock davinci-workload --json
# A user's own daemon: a socket directory someone else prepared is refused ...
rm -rf /tmp/davinci-1000
mkdir -m 0777 /tmp/davinci-1000
cap dir-refused $U davinci-mockd
chown 1000 /tmp/davinci-1000
cap dir-refused2 $U davinci-mockd
rm -rf /tmp/davinci-1000
# ... and the user's own daemon makes the user an admin; another user is refused, with a hint.
$U davinci-mockd --devices 1 --share-mode shared --socket-mode 0666 > out/own-stdout.txt 2> out/own-stderr.txt &
OPID=$!
sleep 0.5
cap own-set $U davinci-smi set -t device-share -i 0 -d 0
cap own-refused setpriv --reuid 1001 --regid 1001 --clear-groups env DAVINCI_MOCKD_UID=1000 davinci-smi --socket-dir /tmp/davinci-1000 set -t device-share -i 0 -d 1
kill -TERM $OPID; wait $OPID
# A tenant's share of the slots (TENANT_SHARE): uid 1000's client holds its slot on davinci0.
davinci-mockd --devices 2 --share-mode shared --socket-mode 0666 --tenant-share container:feedbeef0123=0 > /dev/null 2>&1 &
TPID=$!
sleep 0.5
exec 6> >(setpriv --reuid 1000 --regid 1000 --clear-groups $B/davinci-testclient hold --device mock:$D/davinci0.sock > out/t1.txt)
sleep 0.5
cap tenantset davinci-smi set -t tenant-share -i 0 --tenant user:1000 -d 2
cap tenantsetjson davinci-smi set -t tenant-share -i all --tenant user:1000 -d 2 --json
cap tenantinfo davinci-smi info -t tenant-share
cap tenantexact davinci-smi info -t tenant-share -i 0 --tenant container:feedbeef0123 --exact --json
cap tenantnone davinci-smi set -t tenant-share -i 0 --tenant container:feed -d 1
cap tenantbad davinci-smi set -t tenant-share -i 0 --tenant user:1000 -d 5
cap tenantperm $U davinci-smi set -t tenant-share -i 0 --tenant user:1000 -d 4
exec 6>&-
sleep 0.3
kill -TERM $TPID; wait $TPID
davinci-mockd --devices 2 --memory 256M --socket-group 4243 --admin-group 4242 > out/mockd-stdout.txt 2> out/mockd-stderr.txt &
MPID=$!
sleep 0.5
ls -l $D > out/ls.txt
# The walkthrough's step 2 as an operator who is not root, a member of the sockets' group.
cap walk-info setpriv --reuid 1000 --regid 1000 --groups 4243 davinci-smi info
cap list davinci-smi list
cap info0 davinci-smi info
cap share0 davinci-smi info -t device-share -i 0
cap chip davinci-smi info -t device-share -i 0 -c 0
cap chipbad davinci-smi info -t device-share -i 0 -c 1 --json
cap twice davinci-smi --device mock:$D/davinci0.sock --device mock:$D//./davinci0.sock list
# One client holds davinci0 (exclusive): a second one is refused.
exec 3> >($B/davinci-testclient hold --device mock:$D/davinci0.sock --mem 1048576 > out/c1.txt)
sleep 0.5
cap busy env DAVINCI_DEVICE=mock:$D/davinci0.sock $B/davinci-testclient hold
cap set1 davinci-smi set -t device-share -i 0 -d 1
cap set1again davinci-smi set -t device-share -i 0 -d 1 --json
exec 4> >($B/davinci-testclient work --device mock:$D/davinci0.sock --rounds 100 --elems 65536 --hold > out/c2.txt)
exec 5> >($B/davinci-testclient work --device mock:$D/davinci0.sock --rounds 50 --hold > out/c3.txt)
sleep 2
cap info1 davinci-smi info
cap infojson davinci-smi info -i 0 --json
cap share1 davinci-smi info -t device-share -i 0
cap sharejson davinci-smi info -t device-share -i 0 --json
cap usage davinci-smi info -t usage -i 0
cap usagejson davinci-smi info -t usage -i 0 --json
cap query davinci-smi info --query index,health,memory.used,memory.total,clients,share_mode --format csv
cap queryusage davinci-smi info -t usage --query timestamp,index,pid,process_name,container_id,memory.used,tasks.submitted,tasks.queued,tasks.completed --format csv,noheader,nounits --loop 1 --count 2
cap querybad davinci-smi info -t usage --query index,bogus
cap setbusy davinci-smi set -t device-share -i all -d 0
cap setbusyjson davinci-smi set -t device-share -i all -d 0 --json
cap setperm setpriv --reuid 1000 --regid 1000 --groups 4243 davinci-smi --socket-dir /run/davinci set -t device-share -i 1 -d 1
cap setgroup setpriv --reuid 1000 --regid 1000 --groups 4243,4242 davinci-smi --socket-dir /run/davinci set -t device-share -i 1 -d 1 --yes
cap nosock setpriv --reuid 1000 --regid 1000 --clear-groups davinci-smi --socket-dir /run/davinci info -i 1
cap list1 davinci-smi -l --json
cap badid davinci-smi info -t usage -i 7
cap usageerr davinci-smi set -t device-share -i 0 -d 2
# The fleet view, with the clients above still attached: metrics, Prometheus, CDI, the
# device plugin against the kubelet stand-in.
davinci-exporter --help > out/exporter-help.txt
davinci-device-plugin --help > out/plugin-help.txt
davinci-smi cdi generate --help > out/smi-cdi-help.txt
cap exporter-once davinci-exporter --once
{ echo "\$ davinci-exporter --once --device mock:$D/davinci0.sock --device /dev/davinci3 | grep -E '^davinci_device_(up|error_info)'"
  davinci-exporter --once --device mock:$D/davinci0.sock --device /dev/davinci3 2>&1 | grep -E '^davinci_device_(up|error_info)[{]|^davinci-exporter: device'
} > out/exporter-once-dev.txt
P=/tmp/davinci-prometheus
rm -rf $P; mkdir -p $P
cat > $P/prometheus.yml <<'YML'
global:
  scrape_interval: 5s
scrape_configs:
  - job_name: davinci
    static_configs:
      - targets: ["127.0.0.1:9464"]
YML
cp $P/prometheus.yml out/prom-config.txt
davinci-exporter --client-series > out/exporter-log.txt 2>&1 &
EPID=$!
prometheus --config.file=$P/prometheus.yml --storage.tsdb.path=$P/data \
    --web.listen-address=127.0.0.1:9090 > $P/log.txt 2>&1 &
PPID_=$!
for _ in $(seq 60); do
  curl -s 'http://127.0.0.1:9090/api/v1/query?query=up' | grep -q '"value"' && break
  sleep 0.5
done
sleep 6
promq() { # query: what the HTTP API answers, pretty-printed
  echo "\$ curl -s 'http://127.0.0.1:9090/api/v1/query?query=$1' | python3 -m json.tool"
  curl -s "http://127.0.0.1:9090/api/v1/query?query=$1" | python3 -m json.tool
}
promq 'davinci_device_memory_used_bytes' > out/prom-memory.txt
promq 'sum%20by%20(device,process)(davinci_client_tasks_completed_total)' > out/prom-tasks.txt
kill -TERM $PPID_ $EPID; wait $PPID_ $EPID 2>/dev/null
echo "[exit status $?]" >> out/exporter-log.txt
rm -rf $P
mkdir -p /var/run/cdi
cap cdi-gen davinci-smi cdi generate
cap cdi-file davinci-smi cdi generate -o /var/run/cdi/davinci.yaml
cap cdi-nodir davinci-smi cdi generate -o /etc/cdi-missing/davinci.yaml
cap cdi-badkind davinci-smi cdi generate --kind npu
rm -f /var/run/cdi/davinci.yaml
cap plugin-list davinci-device-plugin --list
K=/tmp/davinci-k8s
rm -rf $K; mkdir -p $K
$B/examples/kubelet_standin --dir $K --allocate 2 > out/standin.txt 2>&1 &
SPID=$!
sleep 0.5
davinci-device-plugin --kubelet-dir $K --health-interval 1s > out/plugin-log.txt 2>&1 &
DPID=$!
sleep 3
kill -TERM $DPID; wait $DPID; echo "[exit status $?]" >> out/plugin-log.txt
kill -TERM $SPID; wait $SPID 2>/dev/null
rm -rf $K
exec 3>&- 4>&- 5>&-
sleep 1
cap after davinci-smi info
cap workload davinci-workload --device mock:$D/davinci1.sock --tasks 20000
kill -TERM $MPID; wait $MPID; echo "[exit status $?]" >> out/mockd-stderr.txt
ls -l $D >> out/ls.txt 2>&1
cap gone davinci-smi --device mock:$D/davinci0.sock info --json
python3 "$ROOT/scripts/docs/operators-gen.py" "$WORK/out" "$ROOT/docs/operators.md.in" "$ROOT/docs/operators.md" "$B/"
rm -rf "$WORK"
