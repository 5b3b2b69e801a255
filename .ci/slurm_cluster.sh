#!/usr/bin/env bash
# A single-node SLURM cluster with accounting on this machine, for the SLURM tests (tests/test_slurm.py)
# and for trying hydra/launcher=slurm without a cluster (docs/training.md, "A study on a SLURM cluster").
#
#   .ci/slurm_cluster.sh install   # as root: Debian's slurmctld slurmd slurm-client munge slurmdbd mariadb-server
#   .ci/slurm_cluster.sh start     # install if needed, then munged, a private MariaDB, slurmdbd, slurmctld, slurmd
#   .ci/slurm_cluster.sh stop      # cancel every job, then stop the daemons it started, by their pid files
#   .ci/slurm_cluster.sh status    # sinfo and the daemons' pids
#
# No systemd: each daemon is started in daemon mode with a pid file under $ABLATE_SLURM_DIR
# (default /tmp/ablate-slurm), which also holds the database, the spool and the logs. Clients read
# /etc/slurm/slurm.conf: it is written with a marker line, and a slurm.conf without that marker (a real
# cluster's) is never overwritten. Timings on a 2-core machine: install ~20 s, start ~5 s.
# Settings that matter (issue 62): accounting (without it sacct fails and submitit waits forever on a
# cancelled job), AuthInfo=cred_expire=5 and fast scheduler passes (a requeued job restarts in ~7 s, not
# 120 s), MailProg=/bin/true, SlurmdParameters=config_overrides (the node's layout as written here).
set -euo pipefail

DIR=${ABLATE_SLURM_DIR:-/tmp/ablate-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by ablate .ci/slurm_cluster.sh"
DB_PORT=${ABLATE_SLURM_DB_PORT:-33061}
CPUS=${ABLATE_SLURM_CPUS:-4}  # the node may advertise more CPUs than cores: small jobs run side by side
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)  # the order `stop` stops them in

say() { echo "slurm_cluster: $*" >&2; }
die() { say "$*"; exit 2; }

installed() {
    local cmd
    for cmd in slurmctld slurmd slurmdbd sbatch sacct munged mariadbd mariadb-install-db; do
        command -v "$cmd" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$cmd" >/dev/null 2>&1 || return 1
    done
}

install() {
    installed && return 0
    [ "$(id -u)" = 0 ] || die "installing SLURM needs root (apt-get install ${PACKAGES[*]})"
    command -v apt-get >/dev/null || die "no apt-get: install ${PACKAGES[*]} with this system's package manager"
    local start=$SECONDS
    apt-get update -qq
    # policy-rc.d 101: the packages' own services are not started (this script starts what it needs)
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made_policy=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
    [ "$made_policy" = 1 ] && rm -f "$policy"
    say "installed ${PACKAGES[*]} in $((SECONDS - start)) s"
}

alive() { [ -s "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local limit=$1 what=$2 i
    shift 2
    for ((i = 0; i < limit * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "$what did not come up within $limit s (logs in $DIR/log)"
}

write_slurm_conf() {
    local host=$1
    if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script (a real cluster's?): not overwriting it"
    fi
    mkdir -p /etc/slurm
    cat >"$CONF.tmp" <<EOF
$MARK ($DIR)
ClusterName=ablate
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
CredType=cred/munge
MailProg=/bin/true
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${ABLATE_SLURMCTLD_PORT:-6817}
SlurmdPort=${ABLATE_SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
# as conservative clusters set it: a job that may be requeued asks for it (sbatch --requeue)
JobRequeue=0
MinJobAge=300
KillWait=10
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=${ABLATE_SLURM_MEM_MB:-16000} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    mv "$CONF.tmp" "$CONF"
}

start_munge() {
    alive munged && return 0
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p "$DIR/munge"; chown munge:munge "$DIR/munge"  # munged runs as munge: its log and pid file there
    runuser -u munge -- /usr/sbin/munged --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log"
    ln -sf munge/munged.pid "$DIR/munged.pid"
    wait_for 10 munged munge -n
}

start_mariadb() {
    alive mariadbd && return 0
    if [ ! -d "$DIR/mysql/mysql" ]; then
        mariadb-install-db --no-defaults --user=root --datadir="$DIR/mysql" --auth-root-authentication-method=normal \
            --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1
    fi
    # --no-defaults: the system's my.cnf (and its server) play no part; a loopback port and a private socket
    setsid /usr/sbin/mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$DIR/mysql.sock" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$DIR/mariadbd.pid" --skip-name-resolve \
        --log-error="$DIR/log/mariadbd.log" </dev/null >/dev/null 2>&1 &
    wait_for 30 "mariadbd" mariadb --no-defaults --socket="$DIR/mysql.sock" -uroot -e "select 1"
    mariadb --no-defaults --socket="$DIR/mysql.sock" -uroot -e \
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'ablate';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
}

start_slurmdbd() {
    alive slurmdbd && return 0
    local conf=/etc/slurm/slurmdbd.conf
    if [ -e "$conf" ] && ! grep -qF "$MARK" "$conf"; then die "$conf exists and was not written by this script"; fi
    (umask 077; cat >"$conf" <<EOF
$MARK ($DIR)
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=ablate
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$conf"
    /usr/sbin/slurmdbd
    wait_for 30 slurmdbd sacctmgr -i -n list cluster
}

start() {
    install
    [ "$(id -u)" = 0 ] || die "starting the daemons needs root"
    local start=$SECONDS host
    host=$(hostname -s)
    mkdir -p "$DIR"/{state,spool,log}
    write_slurm_conf "$host"
    start_munge
    start_mariadb
    start_slurmdbd
    sacctmgr -i -n list cluster format=cluster | grep -qw ablate || sacctmgr -i add cluster ablate >/dev/null
    sacctmgr -i -n list account format=account | grep -qw root >/dev/null || true
    alive slurmctld || /usr/sbin/slurmctld
    wait_for 30 slurmctld scontrol ping
    alive slurmd || /usr/sbin/slurmd
    wait_for 30 "the node" sh -c "sinfo -h -N -o '%T' | grep -qE '^(idle|mixed|allocated)'"
    say "started in $((SECONDS - start)) s: $(sinfo -h -o '%P %D %T %C')"
}

stop() {
    if command -v scancel >/dev/null && alive slurmctld; then
        scancel --full --quiet -u root 2>/dev/null || true
        # stopping slurmd leaves running jobs' slurmstepd behind: wait for the jobs to go first
        local i
        for ((i = 0; i < 60; i++)); do
            [ -z "$(squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    local name pid i
    for name in "${DAEMONS[@]}"; do
        alive "$name" || { rm -f "$DIR/$name.pid"; continue; }
        pid=$(cat "$DIR/$name.pid")
        kill "$pid"
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { say "$name ($pid) did not stop in 10 s: killing it"; kill -9 "$pid"; }
        rm -f "$DIR/$name.pid"
    done
    say "stopped"
}

status() {
    local name
    for name in "${DAEMONS[@]}"; do
        if alive "$name"; then echo "$name: $(cat "$DIR/$name.pid")"; else echo "$name: not running"; fi
    done
    alive slurmctld && sinfo
    return 0
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 install|start|stop|status (state in \$ABLATE_SLURM_DIR, default /tmp/ablate-slurm)" ;;
esac
