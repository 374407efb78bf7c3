#!/usr/bin/env bash
# A real two-node Slurm cluster on this one host for gpusched's Slurm
# tests (docs/BEHAVIOUR.md "Slurm", "Several nodes"), from Debian's
# packages (built with MULTIPLE_SLURMD, so one host runs a slurmd per
# node), started as root without systemd.
#
#   scripts/slurm-test-cluster.sh up     # install (if needed), configure, start
#   scripts/slurm-test-cluster.sh down   # stop the daemons
#   scripts/slurm-test-cluster.sh status # sinfo, and exit 0 when it answers
#
# Each node has 4 fake GPUs of type `fake` (character devices made with
# mknod, so that Slurm sets CUDA_VISIBLE_DEVICES) and 16 shards (4 per GPU)
# for jobs that declare VRAM. Partition `debug` (the default) is the first
# node alone, as the one-node tests expect; partition `multi` is both. A
# task whose FAKE_NVML_STATE has a twin named `<that file>.<node>` gets
# the twin on that node (a TaskProlog), so that each node shows the fake
# NVML GPUs of its own. Accounting goes to slurmdbd over a local
# MariaDB, so that `sacct` lists jobs and their steps (a pilot's jobs run as
# job steps). State lives in $GPUSCHED_SLURM_DIR (default
# /tmp/gpusched-slurm). Needs root; says so and exits 1 otherwise.
set -euo pipefail

dir="${GPUSCHED_SLURM_DIR:-/tmp/gpusched-slurm}"
node="${GPUSCHED_SLURM_NODE:-gpusched-node}"
node2="${node}2"
conf=/etc/slurm/slurm.conf

die() { echo "slurm-test-cluster: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (to install Debian's slurm packages and start the daemons)"
}

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null \
        && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; then
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q slurmctld slurmd slurm-client munge slurmdbd mariadb-server >/dev/null
}

configure() {
    mkdir -p "$dir"/{state,spool,log,dev} "$dir/spool/$node" "$dir/spool/$node2" /etc/slurm /run/munge
    for i in 0 1 2 3; do
        [ -c "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 195 "$i"
    done
    local cpus mem
    # More CPUs than the machine has (config_overrides lets slurmd accept
    # that), so that a job's CPU is never what keeps it waiting: the tests
    # are about GPUs and shards.
    cpus=32
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    cat > "$conf" <<EOF
# Written by gpusched's scripts/slurm-test-cluster.sh: a one-node test cluster.
ClusterName=gpusched-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TaskProlog=/etc/slurm/gpusched-task-prolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=defer_batch=0
DependencyParameters=kill_invalid_depend
ReturnToService=2
SlurmdParameters=config_overrides
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
GresTypes=gpu,shard
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 Port=6818 CPUs=$cpus RealMemory=$mem Gres=gpu:fake:4,shard:16 State=UNKNOWN
NodeName=$node2 NodeAddr=127.0.0.1 Port=6820 CPUs=$cpus RealMemory=$mem Gres=gpu:fake:4,shard:16 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
PartitionName=multi Nodes=$node,$node2 MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    {
        echo "AutoDetect=off"
        for n in "$node" "$node2"; do
            echo "NodeName=$n Name=gpu Type=fake File=$dir/dev/nvidia[0-3]"
            for i in 0 1 2 3; do
                echo "NodeName=$n Name=shard Count=4 File=$dir/dev/nvidia$i"
            done
        done
    } > /etc/slurm/gres.conf
    cat > /etc/slurm/gpusched-task-prolog.sh <<'EOF'
#!/bin/sh
# Written by gpusched's scripts/slurm-test-cluster.sh: each node of the
# one-host test cluster shows its own fake NVML GPUs.
if [ -n "${FAKE_NVML_STATE:-}" ] && [ -f "$FAKE_NVML_STATE.$SLURMD_NODENAME" ]; then
    echo "export FAKE_NVML_STATE=$FAKE_NVML_STATE.$SLURMD_NODENAME"
fi
EOF
    chmod 755 /etc/slurm/gpusched-task-prolog.sh
    cat > /etc/slurm/cgroup.conf <<EOF
CgroupPlugin=cgroup/v1
EOF
    # slurmdbd refuses a configuration file others can read (it holds the
    # database password).
    (umask 077; cat > /etc/slurm/slurmdbd.conf <<EOF
# Written by gpusched's scripts/slurm-test-cluster.sh: accounting for the test cluster.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=gpusched-test
StorageLoc=slurm_acct_db
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
EOF
)
}

# MariaDB for slurmdbd, with its user and database, then slurmdbd with
# the test cluster registered.
start_accounting() {
    if ! mysqladmin ping >/dev/null 2>&1; then
        /etc/init.d/mariadb start >/dev/null || die "MariaDB did not start"
    fi
    mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'gpusched-test';
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" \
        || die "cannot create slurmdbd's database user"
    running "$dir/slurmdbd.pid" || slurmdbd
    for _ in $(seq 1 100); do
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.2
    done
    sacctmgr -n list cluster >/dev/null 2>&1 || {
        tail -n 20 "$dir/log/slurmdbd.log" >&2 || true
        die "slurmdbd did not answer"
    }
    sacctmgr -n -P list cluster format=cluster | grep -qx gpusched-test \
        || sacctmgr -i add cluster gpusched-test >/dev/null
}

running() {
    local pidfile=$1
    [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start() {
    # Three tries: a munged that was just stopped (a cluster taken down a
    # moment before) can still hold its socket's lock for a while.
    for _ in 1 2 3; do
        if ! pgrep -x munged >/dev/null; then
            chown -R munge:munge /etc/munge /run/munge
            runuser -u munge -- /usr/sbin/munged || true
        fi
        for _ in $(seq 1 50); do
            [ -S /run/munge/munge.socket.2 ] && break
            sleep 0.1
        done
        [ -S /run/munge/munge.socket.2 ] && break
        sleep 1
    done
    [ -S /run/munge/munge.socket.2 ] || die "munged did not start"
    start_accounting
    running "$dir/slurmctld.pid" || slurmctld -f "$conf"
    for n in "$node" "$node2"; do
        running "$dir/slurmd-$n.pid" || slurmd -f "$conf" -N "$n"
    done
    for _ in $(seq 1 60); do
        if [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -cE ' (idle|mixed|allocated)$')" -ge 2 ]; then
            return
        fi
        for n in "$node" "$node2"; do
            scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
        done
        sleep 0.5
    done
    echo "slurm-test-cluster: the nodes did not come up; logs:" >&2
    tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd-$node.log" "$dir/log/slurmd-$node2.log" >&2 || true
    exit 1
}

# Sends SIGTERM to the processes named $@ and waits (up to 20 s) until
# they are gone: a daemon removes its pid file before it has exited, and
# a new one started meanwhile would find its ports taken.
terminate() {
    local pids
    pids=$(pgrep -x "$1" || true)
    [ -n "$pids" ] || return 0
    kill $pids 2>/dev/null || true
    for _ in $(seq 1 200); do
        local alive=""
        for pid in $pids; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ -z "$alive" ] && return 0
        sleep 0.1
    done
    kill -9 $pids 2>/dev/null || true
}

stop() {
    terminate slurmd
    terminate slurmctld
    terminate slurmdbd
    terminate munged
    if mysqladmin ping >/dev/null 2>&1; then
        /etc/init.d/mariadb stop >/dev/null || true
    fi
}

case "${1:-}" in
    up) need_root; install; configure; start; sinfo ;;
    down) need_root; stop ;;
    status) sinfo && scontrol show node "$node" "$node2" | grep -E 'NodeName|State|Gres' ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
