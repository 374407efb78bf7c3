#!/usr/bin/env bash
# A real two-node Slurm cluster on this one host for gpusched's Slurm
# tests (docs/BEHAVIOUR.md "Slurm", "Several nodes"), from Debian's
# packages (built with MULTIPLE_SLURMD, so one host runs a slurmd per
# node), started as root without systemd.
#
#   scripts/slurm-test-cluster.sh install # Debian's packages, if missing
#   scripts/slurm-test-cluster.sh up      # install, configure, start
#   scripts/slurm-test-cluster.sh down    # stop the daemons it started
#   scripts/slurm-test-cluster.sh status  # sinfo, and exit 0 when it answers
#   scripts/slurm-test-cluster.sh env     # the line to give clients its config
#
# It stays in its own prefix, $GPUSCHED_SLURM_DIR (default
# /tmp/gpusched-slurm), and is a good neighbour to any Slurm on the
# machine (docs/DEVELOPMENT.md "The Slurm test cluster"): its own
# slurm.conf and the files beside it in $dir/etc (clients find them
# through SLURM_CONF, which `up` and `env` print), its own munged with
# its own key and socket, its own MariaDB with its own data directory,
# its own ports (slurmctld 16817, slurmd 16818 and 16820, slurmdbd
# 16819, MariaDB 16306); it never writes /etc, and `down` stops only the
# pids it started (from its own pid files, each checked to be the
# daemon it names).
#
# Each node has 4 fake GPUs of type `fake` (character devices made with
# mknod, so that Slurm sets CUDA_VISIBLE_DEVICES) and 16 shards (4 per GPU)
# for jobs that declare VRAM. Partition `debug` (the default) is the first
# node alone, as the one-node tests expect; partition `multi` is both. A
# task whose FAKE_NVML_STATE has a twin named `<that file>.<node>` gets
# the twin on that node (a TaskProlog), so that each node shows the fake
# NVML GPUs of its own. Accounting goes to slurmdbd over the cluster's
# own MariaDB, so that `sacct` lists jobs and their steps (a pilot's jobs
# run as job steps). Needs root; says so and exits 1 otherwise.
set -euo pipefail

dir="${GPUSCHED_SLURM_DIR:-/tmp/gpusched-slurm}"
node="${GPUSCHED_SLURM_NODE:-gpusched-node}"
node2="${node}2"
etc=$dir/etc
conf=$etc/slurm.conf
munge=$dir/munge
socket=$munge/munge.socket
db=$dir/mysql
db_port=16306
export SLURM_CONF=$conf

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

# Whether Slurm's cgroup/v1 plugin can work here: root, with the freezer,
# memory and cpuset controllers each mounted on a v1 hierarchy of its own
# that we can make a directory in.
cgroup_v1_usable() {
    [ "$(id -u)" = 0 ] || return 1
    local c probe
    for c in freezer memory cpuset; do
        grep -qE "^cgroup /sys/fs/cgroup/$c cgroup .*\b$c\b" /proc/mounts || return 1
        probe=/sys/fs/cgroup/$c/gpusched-slurm-probe-$$
        mkdir "$probe" 2>/dev/null || return 1
        rmdir "$probe"
    done
}

configure() {
    mkdir -p "$dir"/{state,spool,log,dev} "$dir/spool/$node" "$dir/spool/$node2" "$etc"
    chmod 755 "$dir" "$etc"
    for i in 0 1 2 3; do
        [ -c "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 195 "$i"
    done
    local cpus mem
    # More CPUs than the machine has (config_overrides lets slurmd accept
    # that), so that a job's CPU is never what keeps it waiting: the tests
    # are about GPUs and shards.
    cpus=32
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    # Processes tracked and jobs' tasks confined by cgroup, as production
    # clusters do (slurm.conf(5) ProctrackType, TaskPlugin), where the
    # machine has cgroup v1's freezer, memory and cpuset hierarchies and we
    # are root; else by the process tree. GPUSCHED_SLURM_PROCTRACK=linuxproc
    # forces the latter.
    local proctrack=proctrack/linuxproc task=task/none
    if [ "${GPUSCHED_SLURM_PROCTRACK:-cgroup}" = cgroup ] && cgroup_v1_usable; then
        proctrack=proctrack/cgroup task=task/cgroup
    fi
    echo "slurm-test-cluster: $proctrack, $task" >&2
    cat > "$conf" <<EOF
# Written by gpusched's scripts/slurm-test-cluster.sh: a one-node test cluster.
ClusterName=gpusched-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket,cred_expire=10
SlurmctldPort=16817
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TaskProlog=$etc/gpusched-task-prolog.sh
ProctrackType=$proctrack
TaskPlugin=$task
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
AccountingStoragePort=16819
# For slurmdbd, the password names the munge socket to sign with
# (slurm.conf(5) AccountingStoragePass); AuthInfo covers the rest.
AccountingStoragePass=$socket
GresTypes=gpu,shard
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 Port=16818 CPUs=$cpus RealMemory=$mem Gres=gpu:fake:4,shard:16 State=UNKNOWN
NodeName=$node2 NodeAddr=127.0.0.1 Port=16820 CPUs=$cpus RealMemory=$mem Gres=gpu:fake:4,shard:16 State=UNKNOWN
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
    } > "$etc/gres.conf"
    cat > "$etc/gpusched-task-prolog.sh" <<'EOF'
#!/bin/sh
# Written by gpusched's scripts/slurm-test-cluster.sh: each node of the
# one-host test cluster shows its own fake NVML GPUs.
if [ -n "${FAKE_NVML_STATE:-}" ] && [ -f "$FAKE_NVML_STATE.$SLURMD_NODENAME" ]; then
    echo "export FAKE_NVML_STATE=$FAKE_NVML_STATE.$SLURMD_NODENAME"
fi
EOF
    chmod 755 "$etc/gpusched-task-prolog.sh"
    cat > "$etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
EOF
    # slurmdbd refuses a configuration file others can read (it holds the
    # database password).
    (umask 077; cat > "$etc/slurmdbd.conf" <<EOF
# Written by gpusched's scripts/slurm-test-cluster.sh: accounting for the test cluster.
AuthType=auth/munge
AuthInfo=socket=$socket
DbdHost=localhost
DbdPort=16819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=gpusched-test
StorageLoc=slurm_acct_db
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
EOF
)
}

# The cluster's own MariaDB (data, socket, port and pid file under $db),
# with slurmdbd's user and database, then slurmdbd with the test cluster
# registered.
start_accounting() {
    if ! running "$db/mariadbd.pid" mariadbd; then
        if [ ! -d "$db/mysql" ]; then
            mkdir -p "$db"
            chown mysql:mysql "$db"
            mariadb-install-db --user=mysql --datadir="$db" --skip-test-db \
                >"$dir/log/mariadb-install.log" 2>&1 \
                || { tail -n 20 "$dir/log/mariadb-install.log" >&2; die "cannot make MariaDB's data directory"; }
        fi
        setsid mariadbd --no-defaults --user=mysql --datadir="$db" \
            --socket="$db/mariadb.sock" --port=$db_port --bind-address=127.0.0.1 \
            --pid-file="$db/mariadbd.pid" --log-error="$dir/log/mariadb.log" \
            </dev/null >/dev/null 2>&1 &
        for _ in $(seq 1 100); do
            mariadb-admin --no-defaults --socket="$db/mariadb.sock" ping >/dev/null 2>&1 && break
            sleep 0.2
        done
    fi
    mariadb --no-defaults --socket="$db/mariadb.sock" -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'gpusched-test';
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'gpusched-test';
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
        || { tail -n 20 "$dir/log/mariadb.log" >&2 || true; die "cannot create slurmdbd's database user"; }
    running "$dir/slurmdbd.pid" slurmdbd || slurmdbd
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

# Whether the pid in pid file $1 is alive and is the daemon $2 (its
# command name): a pid reused by another process is not ours to stop.
running() {
    local pidfile=$1 name=$2 pid
    [ -f "$pidfile" ] || return 1
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]
}

# The cluster's own munged: its own key, socket, pid, log and seed files
# under $munge, run as the munge user.
start_munge() {
    if running "$munge/munged.pid" munged; then
        return
    fi
    mkdir -p "$munge"
    if [ ! -s "$munge/munge.key" ]; then
        head -c 1024 /dev/urandom > "$munge/munge.key"
    fi
    chown -R munge:munge "$munge"
    chmod 755 "$munge"
    chmod 400 "$munge/munge.key"
    runuser -u munge -- munged --socket="$socket" --key-file="$munge/munge.key" \
        --pid-file="$munge/munged.pid" --log-file="$munge/munged.log" \
        --seed-file="$munge/munged.seed" \
        || { tail -n 5 "$munge/munged.log" >&2 || true; die "munged did not start"; }
    for _ in $(seq 1 50); do
        [ -S "$socket" ] && return
        sleep 0.1
    done
    die "munged did not make its socket $socket"
}

start() {
    start_munge
    start_accounting
    running "$dir/slurmctld.pid" slurmctld || slurmctld -f "$conf"
    for n in "$node" "$node2"; do
        running "$dir/slurmd-$n.pid" slurmd || slurmd -f "$conf" -N "$n"
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

# Sends SIGTERM to the daemon $2 whose pid file is $1, if it is running
# (see `running`), and waits (up to 20 s) until it is gone: a daemon
# removes its pid file before it has exited, and a new one started
# meanwhile would find its ports taken. Nothing else is signalled.
terminate() {
    local pidfile=$1 name=$2 pid
    running "$pidfile" "$name" || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

stop() {
    terminate "$dir/slurmd-$node.pid" slurmd
    terminate "$dir/slurmd-$node2.pid" slurmd
    terminate "$dir/slurmctld.pid" slurmctld
    terminate "$dir/slurmdbd.pid" slurmdbd
    terminate "$db/mariadbd.pid" mariadbd
    terminate "$munge/munged.pid" munged
}

case "${1:-}" in
    install) need_root; install ;;
    up) need_root; install; configure; start; sinfo; echo "export SLURM_CONF=$conf" ;;
    down) need_root; stop ;;
    env) echo "export SLURM_CONF=$conf" ;;
    status) sinfo && scontrol show node "$node" "$node2" | grep -E 'NodeName|State|Gres' ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
