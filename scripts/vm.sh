#!/usr/bin/env bash
# Run ONE command inside a throwaway QEMU VM that boots Debian's stock kernel (which has the
# `tls` module: kernel TLS, which the host kernel lacks) on top of the host's own root
# filesystem, and exit with the command's exit status.
#
#   scripts/vm.sh [--timeout S] [--mem MiB] [--cpus N] [--verbose] [--] CMD [ARGS...]
#   scripts/vm.sh --check   # exit 0 if a VM can be run here, else one line why and exit 2
#
# How it works, and why:
# - The kernel is the newest linux-image-6.*-amd64 apt knows (plain flavour), fetched with
#   `apt-get download` and unpacked with `dpkg -x` into a cache keyed by package version
#   (${EDGEWARM_VM_CACHE:-~/.cache/edgewarm-vm}); it is never installed on the host. The
#   .deb ships no modules.dep (its postinst makes it), so busybox depmod builds one.
# - A tiny initramfs (static busybox + the 9p, overlay, crypto and tls modules) is PID 1 and
#   stays PID 1: it mounts the host's / (virtio-9p, read-only) with a tmpfs overlay on top
#   and runs the command in a chroot of that, in the same working directory. Since PID 1
#   never leaves the initramfs, the kernel's module helper (/sbin/modprobe, e.g. for
#   setsockopt(TCP_ULP, "tls")) runs there; the cached full module tree is bind-mounted on
#   its /lib/modules, so any module of the kernel (veth, nf_tables, ...) can auto-load.
# - The command's stdin is /dev/null; its stdout and stderr travel over two virtio-serial
#   ports to this script's stdout and stderr (binary-safe, no kernel noise). The kernel
#   console goes to a log file, shown only when the VM fails (or live with --verbose). PID 1
#   writes the exit status there as a marker line, and this script exits with it.
# - Writes inside the VM land in RAM and vanish with it: the host is never modified. The
#   command runs as root in the VM.
# - TCG (software emulation) by default; KVM only where the CPU shows vmx/svm and a probe
#   works (a /dev/kvm alone may be a paravirtual one that cannot boot a stock kernel).
#
# Environment: VM_TIMEOUT (seconds, default 600), VM_MEM (MiB, default 2048), VM_CPUS
# (default 2), EDGEWARM_VM_CACHE (the kernel cache), EDGEWARM_VM_KERNEL (a linux-image-*
# package to use instead of the newest), EDGEWARM_VM_ACCEL (tcg|kvm; default: probe),
# EDGEWARM_VM_TCG_THREAD (single|multi, default single: see the note at the qemu command),
# EDGEWARM_VM_ENV (names of extra variables to pass into the VM), EDGEWARM_VM_APPEND (extra
# kernel parameters), EDGEWARM_VM_KEEP=1 (keep the temporary directory, for debugging).
# Exit status: the command's; 124 on timeout; 125 when the VM failed before reporting one;
# 130/143 when interrupted; 2 for usage errors and from a failed --check.
set -euo pipefail

prog=scripts/vm.sh
timeout_s=${VM_TIMEOUT:-600}
mem=${VM_MEM:-2048}
cpus=${VM_CPUS:-2}
verbose=0
check=0
cache_root=${EDGEWARM_VM_CACHE:-${HOME:-/root}/.cache/edgewarm-vm}

usage() {
  sed -n '6,7p' "$0" | sed 's/^# *//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --timeout) timeout_s=${2:-}; shift 2 || usage ;;
    --timeout=*) timeout_s=${1#*=}; shift ;;
    --mem) mem=${2:-}; shift 2 || usage ;;
    --cpus) cpus=${2:-}; shift 2 || usage ;;
    --verbose) verbose=1; shift ;;
    --check) check=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) echo "$prog: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
if [ "$check" = 0 ] && [ $# -eq 0 ]; then usage; fi
for n in "$timeout_s" "$mem" "$cpus"; do
  case $n in '' | *[!0-9]*) echo "$prog: not a number: '$n'" >&2; exit 2 ;; esac
done

# A failure before the command ran: exit 125, or in --check mode one line and exit 2.
fail() {
  if [ "$check" = 1 ]; then echo "vm unavailable: $*"; exit 2; fi
  echo "$prog: $*" >&2
  exit 125
}

as_root() { [ "$(id -u)" -eq 0 ]; }

# ---------------------------------------------------------------------------------------
# Host tools. qemu; a static busybox, which becomes the initramfs's userland (so it must not
# need the host's shared libraries) and also gives us depmod, cpio and xzcat.
ensure_tools() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' ||
    missing+=(busybox-static)
  command -v gzip >/dev/null 2>&1 || missing+=(gzip)
  command -v flock >/dev/null 2>&1 || missing+=(util-linux)
  [ ${#missing[@]} -eq 0 ] && return 0
  as_root || fail "not root, so cannot install: ${missing[*]}"
  echo "$prog: installing ${missing[*]}" >&2
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null 2>&1 || fail "apt-get install ${missing[*]} failed"
  command -v qemu-system-x86_64 >/dev/null 2>&1 || fail "qemu-system-x86_64 missing after install"
}

# Sets bb to a static busybox.
find_busybox() {
  local b
  for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then bb=$b; return 0; fi
  done
  fail "no static busybox (package busybox-static)"
}

# ---------------------------------------------------------------------------------------
# The kernel package: the newest linux-image-6.*-amd64 apt knows, e.g.
# linux-image-6.12.117+deb12-amd64 or linux-image-6.1.0-56-amd64, not the -cloud, -rt, -dbg
# or -unsigned variants; or EDGEWARM_VM_KERNEL.
newest_kernel_pkg() {
  apt-cache search --names-only '^linux-image-6\.[0-9.]+(-[0-9]+)?(\+deb[0-9]+)?-amd64$' 2>/dev/null |
    awk '{print $1}' | sort -V | tail -n 1
}

# Sets pkg and pkgver to what apt would download, or empties them.
resolve_kernel_pkg() {
  pkg=${EDGEWARM_VM_KERNEL:-$(newest_kernel_pkg)}
  pkgver=
  if [ -n "$pkg" ]; then
    pkgver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  fi
  if [ "$pkgver" = "(none)" ]; then pkgver=; fi
}

# Sets kdir (the cache entry; kdir/root is the unpacked package) and kver.
prepare_kernel() {
  local entry updated=0
  mkdir -p "$cache_root" 2>/dev/null || fail "cannot create the cache $cache_root"
  resolve_kernel_pkg
  if [ -z "$pkgver" ] && as_root; then
    # A fresh machine may have no package lists yet.
    apt-get update -qq >/dev/null 2>&1 || true
    updated=1
    resolve_kernel_pkg
  fi
  if [ -z "$pkgver" ]; then
    [ -z "${EDGEWARM_VM_KERNEL:-}" ] || fail "apt knows no package $EDGEWARM_VM_KERNEL"
    # apt knows no kernel (offline, no lists): take the newest complete cache entry.
    entry=$(find "$cache_root" -mindepth 2 -maxdepth 2 -name .complete -printf '%h\n' 2>/dev/null |
      sort -V | tail -n 1)
    [ -n "$entry" ] || fail "apt knows no linux-image-6.*-amd64 package and none is cached"
  else
    entry=$cache_root/${pkg}_$pkgver
  fi
  if [ ! -e "$entry/.complete" ]; then
    # One builder at a time; a concurrent run waits here and then finds the entry done.
    exec 9>"$cache_root/.lock"
    flock 9
    if [ ! -e "$entry/.complete" ]; then
      if ! build_cache_entry "$entry" && [ "$updated" = 0 ] && as_root; then
        # The lists may name a version the archive no longer has.
        apt-get update -qq >/dev/null 2>&1 || true
        resolve_kernel_pkg
        [ -n "$pkgver" ] || fail "apt knows no linux-image-6.*-amd64 package"
        entry=$cache_root/${pkg}_$pkgver
        [ -e "$entry/.complete" ] || build_cache_entry "$entry" || fail "could not fetch $pkg"
      fi
      [ -e "$entry/.complete" ] || fail "could not fetch $pkg"
    fi
    exec 9>&-
  fi
  kdir=$entry
  kver=$(cat "$kdir/kver")
}

# Downloads and unpacks $pkg into the cache entry $1; returns non-zero on failure.
build_cache_entry() {
  local entry=$1 work deb m mods
  echo "$prog: fetching $pkg $pkgver (once per kernel version)" >&2
  work=$(mktemp -d "$cache_root/.build.XXXXXX")
  # As root, apt would warn that its _apt sandbox user cannot write to this directory.
  if ! (cd "$work" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" "$pkg" >/dev/null); then
    rm -rf "$work"
    return 1
  fi
  deb=$(find "$work" -maxdepth 1 -name '*.deb' | head -n 1)
  # (This function runs in a condition, where set -e is off: each step is checked.)
  dpkg -x "$deb" "$work/root" || { rm -rf "$work"; fail "dpkg -x $deb failed"; }
  rm -f "$deb"
  kver=$(find "$work/root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n 1)
  mods=$work/root/lib/modules/$kver
  if [ -z "$kver" ] || [ ! -e "$work/root/boot/vmlinuz-$kver" ]; then
    rm -rf "$work"
    fail "$pkg holds no kernel"
  fi
  # busybox depmod reads compressed modules itself. Its modules.alias is what lets
  # request_module("tcp-ulp-tls") find tls (about 15 s, once).
  "$bb" depmod -b "$work/root" "$kver" || { rm -rf "$work"; fail "depmod failed"; }
  for m in tls 9p 9pnet_virtio overlay; do
    if [ -z "$(module_path "$mods" "$m")" ] && ! grep -q "/$m\.ko" "$mods/modules.builtin"; then
      rm -rf "$work"
      fail "$pkg lacks the $m module"
    fi
  done
  if ! { echo "$kver" >"$work/kver" && touch "$work/.complete"; }; then
    rm -rf "$work"
    fail "cannot write to $work"
  fi
  # Older kernels' entries are dead weight (about 120 MB each).
  find "$cache_root" -mindepth 1 -maxdepth 1 -name 'linux-image-*' ! -name "${entry##*/}" \
    -exec rm -rf {} + 2>/dev/null || true
  rm -rf "$entry"
  mv "$work" "$entry" || fail "cannot create $entry"
}

# Module name -> its path relative to the modules directory $1, from modules.dep, or
# nothing. Names use '_' where file names may use '-' (aesni_intel is aesni-intel.ko.xz).
module_path() {
  awk -F: -v want="$2" '{
      n = $1; sub(/.*\//, "", n); sub(/\.ko(\.[a-z]+)?$/, "", n); gsub(/-/, "_", n)
      if (n == want) { print $1; exit }
    }' "$1/modules.dep"
}

# ---------------------------------------------------------------------------------------
# The initramfs: what mounting the root needs (before the full module tree is reachable
# over 9p) and what kTLS needs, with their dependencies. Absent ones are skipped (built in,
# or not in this kernel); init loads each one present.
initrd_modules=(virtio_pci 9pnet_virtio 9p overlay virtio_rng
  tls aesni_intel gcm ghash_clmulni_intel ghash_generic ccm chacha20poly1305)

# Copies the closure of initrd_modules into $1/lib/modules/$kver (decompressed: busybox
# insmod can decompress, but only after the kernel first rejects the compressed file with a
# console message), runs depmod there, and lists the modules to load in $1/etc/modules.
stage_modules() {
  local stage=$1 src=$kdir/root/lib/modules/$kver dst m rel deps
  local -A seen=()
  local queue=()
  dst=$stage/lib/modules/$kver
  mkdir -p "$dst" "$stage/etc"
  : >"$stage/etc/modules"
  for m in "${initrd_modules[@]}"; do
    rel=$(module_path "$src" "$m")
    [ -n "$rel" ] || continue
    echo "$m" >>"$stage/etc/modules"
    queue+=("$rel")
  done
  while [ ${#queue[@]} -gt 0 ]; do
    rel=${queue[0]}
    queue=("${queue[@]:1}")
    [ -z "${seen[$rel]:-}" ] || continue
    seen[$rel]=1
    mkdir -p "$dst/${rel%/*}"
    case $rel in
      *.ko.xz) "$bb" xzcat "$src/$rel" >"$dst/${rel%.xz}" ;;
      *.ko.gz) "$bb" zcat "$src/$rel" >"$dst/${rel%.gz}" ;;
      *.ko.zst)
        command -v zstd >/dev/null 2>&1 || fail "zstd is needed to unpack $rel"
        zstd -q -dc "$src/$rel" >"$dst/${rel%.zst}" ;;
      *) cp "$src/$rel" "$dst/$rel" ;;
    esac
    # The dependencies: the words after the colon on the module's modules.dep line.
    read -r -a deps <<<"$(awk -F: -v p="$rel" '$1 == p { print $2; exit }' "$src/modules.dep")"
    queue+=("${deps[@]}")
  done
  cp "$src/modules.builtin" "$src/modules.order" "$dst/" 2>/dev/null || true
  "$bb" depmod -b "$stage" "$kver"
}

# PID 1 of the VM (busybox sh). /etc/edgewarm.conf (written by build_initrd) gives it the
# host directory holding the command, the kernel version, the module tree and the marker.
write_init() {
  cat >"$1" <<'INIT'
#!/bin/busybox sh
# PID 1 of the edgewarm VM. It stays in the initramfs (the kernel runs /sbin/modprobe from
# here); the command runs in a chroot of an overlay: host / over 9p (read-only) + tmpfs.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
. /etc/edgewarm.conf
say() { echo "edgewarm-vm: $*" >/dev/console; }
finish() {
  # The marker the host looks for, on a line of its own in case printk interleaves.
  printf '\n%s=%s\n' "$marker" "$1" >/dev/console
  poweroff -f
  echo o >/proc/sysrq-trigger
}
trap 'finish fail' EXIT
for m in $(cat /etc/modules); do modprobe "$m" || say "modprobe $m failed"; done
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /lower ||
  { say "mounting the host's / over 9p failed"; exit 1; }
mount -t tmpfs -o mode=0755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
  { say "mounting the overlay failed"; exit 1; }
# Every module of the kernel, for request_module() (veth, nf_tables, ...), here and in the
# chroot.
if [ -e "/lower$kmods/modules.dep" ]; then
  mount --bind "/lower$kmods" "/lib/modules/$kver"
fi
mkdir -p "/newroot/lib/modules/$kver"
mount --bind "/lib/modules/$kver" "/newroot/lib/modules/$kver"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
# What udev would make: bash's process substitution needs /dev/fd.
ln -sf /proc/self/fd /newroot/dev/fd
ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout
ln -sf /proc/self/fd/2 /newroot/dev/stderr
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
mount -t tmpfs -o mode=0755 run /newroot/run
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup 2>/dev/null
# /tmp stays the overlay's: the host's files show through (the command file, and a working
# directory under /tmp), and writes go to RAM like everywhere else.
# The host may lack kmod: busybox's lsmod, modprobe, ... come last on the command's PATH.
mkdir -p /newroot/run/edgewarm-vm/bin
cp /bin/busybox /newroot/run/edgewarm-vm/bin/
for a in lsmod modprobe insmod rmmod modinfo depmod; do
  ln -s busybox "/newroot/run/edgewarm-vm/bin/$a"
done
ip link set lo up
hostname edgewarm-vm
# The command's stdout and stderr: the virtio-serial ports named edgewarm.out and .err.
out=/dev/null err=/dev/null
for p in /sys/class/virtio-ports/*; do
  case $(cat "$p/name" 2>/dev/null) in
    edgewarm.out) out=/dev/${p##*/} ;;
    edgewarm.err) err=/dev/${p##*/} ;;
  esac
done
printf '\n%s:start\n' "$marker" >/dev/console
env -i chroot /newroot /bin/sh "$dir/cmd.sh" </dev/null >"$out" 2>"$err"
rc=$?
trap - EXIT
finish "$rc"
INIT
  chmod 755 "$1"
}

# POSIX single quoting: safe for any bytes but NUL.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# Writes $tmp/initrd.gz.
build_initrd() {
  local stage=$tmp/initrd
  mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,lib/modules}
  cp "$bb" "$stage/bin/busybox"
  ln -s busybox "$stage/bin/sh"
  stage_modules "$stage" >/dev/null
  write_init "$stage/init"
  {
    echo "dir=$(sq "$tmp")"
    echo "kver=$(sq "$kver")"
    echo "kmods=$(sq "$kdir/root/lib/modules/$kver")"
    echo "marker=$(sq "$marker")"
  } >"$stage/etc/edgewarm.conf"
  (cd "$stage" && find . | "$bb" cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$tmp/initrd.gz"
  rm -rf "$stage"
}

# Writes $tmp/cmd.sh, which /bin/sh runs inside the chroot: the same working directory, the
# host's PATH (with the system directories and busybox's module tools appended), HOME, and a
# few variables tests care about.
write_cmd() {
  local v a
  {
    echo "cd $(sq "$(pwd -P)") || exit 125"
    echo "export PATH=$(sq "${PATH:-/usr/local/bin:/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin:/run/edgewarm-vm/bin")"
    echo "export HOME=$(sq "${HOME:-/root}") TERM=$(sq "${TERM:-dumb}") EDGEWARM_VM=1"
    # shellcheck disable=SC2086 # EDGEWARM_VM_ENV is a list of names
    for v in USER LOGNAME LANG LC_ALL TZ CI RUST_LOG RUST_BACKTRACE RUST_TEST_THREADS \
      CARGO_HOME RUSTUP_HOME CARGO_TARGET_DIR ${EDGEWARM_VM_ENV:-}; do
      case $v in '' | [0-9]* | *[!A-Za-z0-9_]*) continue ;; esac
      if [ -n "${!v+set}" ]; then echo "export $v=$(sq "${!v}")"; fi
    done
    printf 'exec'
    for a in "$@"; do printf ' %s' "$(sq "$a")"; done
    echo
  } >"$tmp/cmd.sh"
}

# ---------------------------------------------------------------------------------------
pick_accel() {
  case ${EDGEWARM_VM_ACCEL:-} in
    tcg | kvm) accel=$EDGEWARM_VM_ACCEL; return ;;
  esac
  accel=tcg
  if grep -qwE 'vmx|svm' /proc/cpuinfo 2>/dev/null && [ -r /dev/kvm ] && [ -w /dev/kvm ] &&
    kvm_runs; then
    accel=kvm
  fi
}

# The probe lets a vCPU run for a moment: a paravirtual KVM opens and starts fine but
# aborts on the first run ("failed to set MSR 0x10a"). (The group's 2>/dev/null also
# silences bash's "Aborted" notice.)
kvm_runs() {
  { { echo cont; sleep 0.5; echo quit; } | timeout 10 qemu-system-x86_64 -accel kvm -cpu host \
    -M q35 -nodefaults -display none -S -monitor stdio >/dev/null 2>&1; } 2>/dev/null
}

# One boot. Sets result: the command's exit status, or "init-failed", "timeout", "broken"
# (our stdout or stderr was closed), "crashed" (the VM died before the command started) or
# "died" (after).
qemu_pid='' tail_pid=''
boot() {
  local attempt=$1 budget=$2 out=$tmp/out.$1 err=$tmp/err.$1 log=$tmp/console.$1.log
  local qrc=0 out_pid err_pid cpu=max accel_opt st
  mkfifo "$out" "$err"
  : >"$log"
  if [ "$verbose" = 1 ]; then
    tail -n +1 -f "$log" >&2 &
    tail_pid=$!
  fi
  # TCG is single-threaded by default: with one host thread per vCPU (thread=multi), QEMU
  # 7.2 sometimes lets a vCPU run code another vCPU has just live-patched (the kernel's
  # int3-based text_poke), and the guest dies with "Oops: int3" (seen in 1 of 40 boots).
  # The guest still has $cpus CPUs; they just share one host core (on this project's
  # 2-core machines two busy guest processes took as long with thread=multi anyway).
  accel_opt=tcg,thread=${EDGEWARM_VM_TCG_THREAD:-single}
  if [ "$accel" = kvm ]; then cpu=host accel_opt=kvm; fi
  # mitigations=off: nothing to protect in a throwaway VM, and it is faster under TCG.
  timeout -k 5 "$budget" qemu-system-x86_64 \
    -accel "$accel_opt" -cpu "$cpu" -m "$mem" -smp "$cpus" \
    -nodefaults -display none -no-reboot -monitor none \
    -kernel "$kdir/root/boot/vmlinuz-$kver" -initrd "$tmp/initrd.gz" \
    -append "console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off ${EDGEWARM_VM_APPEND:-}" \
    -serial "file:$log" \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -device virtio-rng-pci \
    -device virtio-serial-pci,id=vser \
    -chardev "file,id=out,path=$out" -device virtserialport,bus=vser.0,chardev=out,name=edgewarm.out \
    -chardev "file,id=err,path=$err" -device virtserialport,bus=vser.0,chardev=err,name=edgewarm.err \
    </dev/null >"$tmp/qemu.$attempt.log" 2>&1 &
  qemu_pid=$!
  # The readers (qemu's open() of each fifo waits for them). Should our stdout or stderr
  # go away (`vm.sh ... | head -1`), the guest would block writing to it forever: stop the
  # VM instead, as SIGPIPE would stop a local command.
  { cat "$out" 2>/dev/null || { touch "$tmp/broken"; kill "$qemu_pid" 2>/dev/null; }; } &
  out_pid=$!
  { cat "$err" >&2 2>/dev/null || { touch "$tmp/broken"; kill "$qemu_pid" 2>/dev/null; }; } &
  err_pid=$!
  # (2>/dev/null: no "Aborted ..." job notice from bash if qemu dies of a signal.)
  wait "$qemu_pid" 2>/dev/null || qrc=$?
  qemu_pid=''
  # If qemu never opened a fifo, its reader is still blocked in open(): opening it
  # read-write ourselves never blocks and lets the reader through to EOF.
  exec 8<>"$out" 8>&- 8<>"$err" 8>&-
  wait "$out_pid" "$err_pid" || true
  if [ -n "$tail_pid" ]; then
    kill "$tail_pid" 2>/dev/null || true
    wait "$tail_pid" 2>/dev/null || true
    tail_pid=''
  fi
  st=$(grep -a -o "${marker}=[0-9a-z]*" "$log" | tail -n 1 | cut -d= -f2 || true)
  if [ -z "$st" ] && [ -e "$tmp/broken" ]; then st=broken; fi
  case $st in
    [0-9]*) result=$st ;;
    broken) result=broken ;;
    fail) result=init-failed ;;
    *)
      if [ "$qrc" = 124 ]; then
        result=timeout
      elif grep -aq "${marker}:start" "$log"; then
        result=died
      else
        result=crashed
      fi
      ;;
  esac
}

# Shows why a boot failed (unless --verbose already showed the console).
show_logs() {
  if [ "$verbose" = 0 ]; then
    tail -n 40 "$tmp/qemu.$1.log" "$tmp/console.$1.log" >&2 || true
  fi
}

cleanup() {
  local p
  for p in $qemu_pid $tail_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${EDGEWARM_VM_KEEP:-}" ]; then
    echo "$prog: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
}

# ---------------------------------------------------------------------------------------
ensure_tools
find_busybox
prepare_kernel
pick_accel
if [ "$check" = 1 ]; then
  echo "vm available: kernel $kver ($kdir), accel $accel"
  exit 0
fi

tmp=$(mktemp -d /tmp/edgewarm-vm.XXXXXX)
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
# A per-run marker, so the command's own output cannot fake an exit status.
marker="EDGEWARM_VM_EXIT_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
build_initrd
write_cmd "$@"

deadline=$((SECONDS + timeout_s))
attempt=1
while :; do
  boot "$attempt" $((deadline - SECONDS > 0 ? deadline - SECONDS : 1))
  case $result in
    [0-9]*) exit "$result" ;;
    timeout)
      echo "$prog: timed out after ${timeout_s}s" >&2
      exit 124 ;;
    broken) exit 141 ;; # 128 + SIGPIPE, what a shell reports for a command killed by it
    crashed)
      # The VM died while booting, before the command started (nothing ran, nothing was
      # printed): boot again, at most three times in all, and under TCG if KVM was it.
      if [ "$attempt" -lt 3 ] && [ $((deadline - SECONDS)) -gt 10 ]; then
        why=$(cat "$tmp/qemu.$attempt.log" "$tmp/console.$attempt.log" |
          grep -a -m1 -E 'Oops|panic|BUG|error|Assertion' | cut -c1-120 || true)
        again="booting again"
        if [ "$accel" = kvm ]; then accel=tcg again="booting again under TCG"; fi
        echo "$prog: the VM crashed while booting (${why:-no message}); $again" >&2
        attempt=$((attempt + 1))
        continue
      fi
      echo "$prog: the VM crashed while booting" >&2 ;;
    init-failed) echo "$prog: the VM's init failed before running the command" >&2 ;;
    died) echo "$prog: the VM died while running the command" >&2 ;;
  esac
  show_logs "$attempt"
  exit 125
done
