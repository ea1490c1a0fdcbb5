#!/usr/bin/env bash
# Apache Traffic Server 9.2 (Debian bookworm's `trafficserver`) as a peer in
# `edgewarm-lab lab --peers` (peers `ats-tunnel` and `ats-prewarm`): one foreground process,
# every file it reads or writes under DIR, nothing left behind once killed. The lab copies this
# script to its run folder and starts it in the edge namespace.
#
#   ats-peer.sh MODE [ADDR:]PORT ORIGIN_ADDR:PORT DIR CERT KEY CA
#
#   MODE tunnel   blind SNI tunnel (sni.yaml tunnel_route): TLS SNI $TUNNEL_SNI (a.test) is
#                 peeked and the bytes go unchanged to ORIGIN; the client talks TLS to the origin.
#   MODE prewarm  partial_blind_route + tunnel_prewarm: ATS terminates the client's TLS for
#                 $PREWARM_SNI (b.test) with CERT/KEY and relays the plaintext over a TLS
#                 connection to ORIGIN taken from a pool of pre-handshaked ones (SNI
#                 $ORIGIN_SNI, origin.test; origin certificate verified against CA, ENFORCED).
#   [ADDR:]PORT   where to listen (ADDR default: every IPv4 address; IPv6 as [addr]:port).
#   DIR           private directory (created; config in DIR/etc, logs DIR/log, sockets DIR/run).
#   CERT KEY      PEM cert/key ATS presents for $PREWARM_SNI (prewarm); unused by tunnel.
#   CA            PEM CA bundle the origin's certificate must chain to (prewarm).
#
# The script writes the config, then execs ATS in the foreground: the PID the caller started
# is the ATS process (SIGTERM stops it, exit 0 after ~1 s). Ready when the port accepts
# (0.1-0.2 s); the prewarm pool is full ~1.2 s after start. With ATS_MANAGER=1 the port
# accepts at once (traffic_manager holds it) but ATS serves only after ~3.2 s: wait for
# "fully initialized" in DIR/log/diags.log instead.
#
# Environment:
#   ATS_SERVER=/path/traffic_server  binary to run (default /usr/bin/traffic_server). PREWARM
#       NEEDS A PATCHED BINARY: every 9.2.x from 9.2.1 on (Debian's is 9.2.9) aborts at start
#       with "failed assertion `this == this_ethread()'" as soon as tunnel pre-warming is on
#       (upstream fix apache/trafficserver#9692, only in 10.x). ATS_FORCE=1 runs it anyway.
#   ATS_MANAGER=1      run traffic_manager (which runs and supervises ATS_SERVER) instead, so
#       that `traffic_ctl --run-root=DIR metric ...` works (9.2's traffic_ctl talks only to
#       traffic_manager). SIGTERM to it stops both; SIGKILL would orphan traffic_server.
#   ATS_STATS_PORT=N   also listen on plain-HTTP 127.0.0.1:N where the stats_over_http plugin
#       answers GET /_stats with every metric as JSON (works without traffic_manager).
#   ATS_THREADS=2      worker (ET_NET) threads.
#   ATS_DEBUG=tags     debug tags (e.g. 'prewarm|ssl_sni|http_ss'), printed on stdout.
#   ATS_UNSHARE=1      run in a private mount namespace where /etc/resolv.conf says
#       "nameserver 127.0.0.1" (ATS reverse-resolves every interface address at start, through
#       the system resolver; this keeps those lookups on loopback). 0 to skip (needs root).
#   TUNNEL_SNI=a.test PREWARM_SNI=b.test ORIGIN_SNI=origin.test
#   PREWARM_MIN=2 PREWARM_MAX=64   pool bounds, PER ET_NET THREAD AND PER ALPN POOL
#   PREWARM_ALPN=h2,http/1.1       ALPN ids pooled (one pool each, plus the no-ALPN pool);
#       without h2 in it, h2 is switched off for the route (a client that negotiated an
#       un-pooled protocol would always miss the pool).
#   PREWARM_CONNECT_TIMEOUT=5 PREWARM_INACTIVE_TIMEOUT=30 (s; keep the latter below the
#       origin's idle timeout for a connection that sent no request: nginx 60 s)
set -euo pipefail

usage() { sed -n '5,16p' "$0" >&2; exit 2; }
[ $# -eq 7 ] || usage
mode=$1 listen=$2 origin=$3 dir=$4 cert=$5 key=$6 ca=$7
case $mode in tunnel | prewarm) ;; *) usage ;; esac

server=${ATS_SERVER:-/usr/bin/traffic_server}
threads=${ATS_THREADS:-2}
tunnel_sni=${TUNNEL_SNI:-a.test} prewarm_sni=${PREWARM_SNI:-b.test} origin_sni=${ORIGIN_SNI:-origin.test}
pmin=${PREWARM_MIN:-2} pmax=${PREWARM_MAX:-64} palpn=${PREWARM_ALPN-h2,http/1.1}
pcto=${PREWARM_CONNECT_TIMEOUT:-5} pito=${PREWARM_INACTIVE_TIMEOUT:-30}

# Listen descriptor: PORT, ADDR:PORT or [V6]:PORT -> "PORT:ssl[:ip-in=ADDR]".
case $listen in
  \[*\]:*) port=${listen##*:} lport="$port:ssl:ip-in=${listen%:*}" ;;
  *:*) port=${listen##*:} lport="$port:ssl:ip-in=${listen%:*}" ;;
  *) port=$listen lport="$port:ssl" ;;
esac
oport=${origin##*:} oaddr=${origin%:*}
oaddr=${oaddr#[} oaddr=${oaddr%]}
[[ $port =~ ^[0-9]+$ && $oport =~ ^[0-9]+$ ]] || usage

if [ "$mode" = prewarm ] && [ "$server" = /usr/bin/traffic_server ] && [ -z "${ATS_FORCE:-}" ] &&
  "$server" -V 2>&1 | grep -q ' - 9\.2\.'; then
  echo "ats-peer.sh: $server (ATS 9.2) aborts at start when tunnel pre-warming is on;" \
    "set ATS_SERVER to a traffic_server with apache/trafficserver#9692 applied (ATS_FORCE=1 to try anyway)" >&2
  exit 3
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
for f in "$cert" "$key" "$ca"; do [ "$mode" = tunnel ] || [ -r "$f" ] || { echo "ats-peer.sh: cannot read $f" >&2; exit 2; }; done
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
cert=$(abs "$cert") key=$(abs "$key") ca=$(abs "$ca")
rm -rf "${dir:?}/etc" "${dir:?}/run" "${dir:?}/log" "${dir:?}/var" "${dir:?}/cache"
mkdir -p "$dir/etc" "$dir/run" "$dir/log" "$dir/var" "$dir/cache"

# Runroot: every ATS path (config, runtime sockets/locks, logs, state, cache) inside DIR;
# bindir is where traffic_manager looks for traffic_server.
cat >"$dir/runroot.yaml" <<EOF
prefix: $dir
exec_prefix: /usr
bindir: $(cd "$(dirname "$server")" && pwd)
sbindir: /usr/sbin
sysconfdir: $dir/etc
datadir: $dir/var
includedir: /usr/include
libdir: /usr/lib/trafficserver
libexecdir: /usr/lib/trafficserver/modules
localstatedir: $dir/var
runtimedir: $dir/run
logdir: $dir/log
cachedir: $dir/cache
EOF

cat >"$dir/etc/records.config" <<EOF
# Stay root (#-1 = do not change user; the default would switch to 'trafficserver', who
# cannot read a private DIR).
CONFIG proxy.config.admin.user_id STRING #-1
# No traffic_crashlog helper process.
CONFIG proxy.config.crash_log_helper STRING NULL
CONFIG proxy.config.http.server_ports STRING $lport${ATS_STATS_PORT:+ ${ATS_STATS_PORT}:ip-in=127.0.0.1}
# Tunnels are refused (an HTML error in place of TLS) unless the origin port is listed here.
CONFIG proxy.config.http.connect_ports STRING $oport
CONFIG proxy.config.url_remap.remap_required INT 0
CONFIG proxy.config.http.cache.http INT 0
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT $threads
CONFIG proxy.config.accept_threads INT 1
CONFIG proxy.config.task_threads INT 1
# Name resolution: our own hosts file, DNS only to loopback (never /etc/resolv.conf's server).
CONFIG proxy.config.hostdb.host_file.path STRING $dir/etc/hosts
CONFIG proxy.config.dns.nameservers STRING 127.0.0.1
CONFIG proxy.config.dns.resolv_conf STRING NULL
CONFIG proxy.config.hostdb.storage_path STRING $dir/cache
CONFIG proxy.config.cache.hostdb.sync_frequency INT 0
CONFIG proxy.config.body_factory.template_sets_dir STRING $dir/etc/body_factory
# Idle limits well above any benchmark pause (defaults: 30 s per transaction).
CONFIG proxy.config.http.transaction_no_activity_timeout_in INT 300
CONFIG proxy.config.http.transaction_no_activity_timeout_out INT 300
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 300
CONFIG proxy.config.http.accept_no_activity_timeout INT 300
CONFIG proxy.config.net.default_inactivity_timeout INT 300
CONFIG proxy.config.ssl.handshake_timeout_in INT 300
# Origin TLS (prewarm): verify against our CA, by chain and name.
CONFIG proxy.config.ssl.client.CA.cert.filename STRING $ca
CONFIG proxy.config.ssl.client.verify.server.policy STRING ENFORCED
CONFIG proxy.config.ssl.client.verify.server.properties STRING ALL
CONFIG proxy.config.ssl.server.multicert.exit_on_load_fail INT 1
# Metrics reach traffic_ctl / stats_over_http within ~1 s (default 5 s).
CONFIG proxy.config.raw_stat_sync_interval_ms INT 1000
CONFIG proxy.config.remote_sync_interval_ms INT 1000
EOF
if [ -n "${ATS_DEBUG:-}" ]; then
  printf 'CONFIG proxy.config.diags.debug.enabled INT 1\nCONFIG proxy.config.diags.debug.tags STRING %s\n' "$ATS_DEBUG" >>"$dir/etc/records.config"
fi

cat >"$dir/etc/ip_allow.yaml" <<EOF
ip_allow:
  - apply: in
    ip_addrs: [0/0, ::/0]
    action: allow
EOF
: >"$dir/etc/remap.config"
: >"$dir/etc/storage.config"
if [ -n "${ATS_STATS_PORT:-}" ]; then echo "stats_over_http.so" >"$dir/etc/plugin.config"; else : >"$dir/etc/plugin.config"; fi
: >"$dir/etc/ssl_multicert.config"
echo "$oaddr $origin_sni" >"$dir/etc/hosts"
mkdir -p "$dir/etc/body_factory"

if [ "$mode" = tunnel ]; then
  case $oaddr in *:*) dest="[$oaddr]:$oport" ;; *) dest="$oaddr:$oport" ;; esac
  cat >"$dir/etc/sni.yaml" <<EOF
sni:
- fqdn: $tunnel_sni
  tunnel_route: $dest
EOF
else
  echo "dest_ip=* ssl_cert_name=$cert ssl_key_name=$key" >"$dir/etc/ssl_multicert.config"
  alpn=$(echo "$palpn" | tr ',' '\n' | sed '/^$/d' | sed 's/.*/"&"/' | paste -sd, -)
  {
    echo "sni:"
    echo "- fqdn: $prewarm_sni"
    echo "  partial_blind_route: $origin_sni:$oport"
    echo "  verify_server_policy: ENFORCED"
    echo "  verify_server_properties: ALL"
    [ -n "$alpn" ] && echo "  tunnel_alpn: [$alpn]"
    case ",$palpn," in *,h2,*) ;; *) echo "  http2: off" ;; esac
    echo "  tunnel_prewarm: true"
    echo "  tunnel_prewarm_min: $pmin"
    echo "  tunnel_prewarm_max: $pmax"
    echo "  tunnel_prewarm_connect_timeout: $pcto"
    echo "  tunnel_prewarm_inactive_timeout: $pito"
  } >"$dir/etc/sni.yaml"
fi

cmd=("$server" "--run-root=$dir/runroot.yaml")
[ -z "${ATS_MANAGER:-}" ] || cmd=(/usr/bin/traffic_manager "--run-root=$dir/runroot.yaml" --nosyslog)
cd "$dir"
if [ "${ATS_UNSHARE:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$dir/resolv.conf"
  # shellcheck disable=SC2016 # the inner shell expands $0 and $@
  exec unshare --mount --propagation private /bin/sh -c \
    'mount --bind "$0" /etc/resolv.conf && exec "$@"' "$dir/resolv.conf" "${cmd[@]}"
fi
exec "${cmd[@]}"
