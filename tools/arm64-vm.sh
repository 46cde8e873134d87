#!/usr/bin/env bash
# Runs warden on arm64 Linux for real, under emulation, on this (x86_64) machine:
# a Debian 12 arm64 userland with python3 and Debian's arm64 kernel, booted by
# qemu-system-aarch64 (TCG, no KVM) with no network device at all (`-nic none`), runs
#   1. `warden selftest` as root and as the login user `warden-test`;
#   2. the real test suite's red-team, wall, fail-closed and selftest tests
#      (`tests/all`, cross-built: a real MCP client against the real binary, every
#      escape judged from outside the sandbox, both modes);
#   3. the library's unit tests (cross-built `cargo test --lib`).
# and prints a summary; the exit status is 0 only when everything passed.
#
# Everything lives under target/arm64-vm/ (kernel, root filesystem archive, logs) and
# is cached: the first run downloads ~150 MB from the Debian mirror and builds the root
# filesystem (debootstrap --foreign, second stage through qemu-user-static); later runs
# only cross-build what changed and boot. `--clean` removes the cache.
#
# Settings (environment):
#   WARDEN_ARM64_SUITE    test filters for tests/all (default below); "none" skips it
#   WARDEN_ARM64_TIMEOUT  seconds the VM may run before it is stopped (default 5400)
#   WARDEN_ARM64_SMP      virtual CPUs (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VM=$ROOT/target/arm64-vm
TARGET=aarch64-unknown-linux-gnu
SUITE=${WARDEN_ARM64_SUITE:-suite::redteam suite::walls suite::fail_closed suite::selftest}
TIMEOUT=${WARDEN_ARM64_TIMEOUT:-5400}
SMP=${WARDEN_ARM64_SMP:-2}
MIRROR=http://deb.debian.org/debian
# The rootfs cache is rebuilt when this changes.
ROOTFS_KEY="bookworm minbase python3 iproute2 kmod user:warden-test v1"

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'arm64-vm: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, binfmt_misc and the cpio of a root filesystem need it)"
[ "$(uname -m)" = x86_64 ] || die "this script emulates arm64 on an x86_64 host; on arm64, run the test suite natively"
if [ "${1:-}" = --clean ]; then
  rm -rf "$VM"
  exit 0
fi
mkdir -p "$VM"

host_packages() {
  local need=()
  command -v qemu-system-aarch64 >/dev/null || need+=(qemu-system-arm)
  [ -x /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || need+=(qemu-user-static)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
  [ -f /usr/aarch64-linux-gnu/include/stdint.h ] || need+=(libc6-dev-arm64-cross)
  command -v cpio >/dev/null || need+=(cpio)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  rustup target add "$TARGET" >/dev/null
}

# apt for arm64 with its own state under $VM/apt, so that the host's apt is untouched:
# Debian 12 and bookworm-backports (Linux 6.12: Landlock ABI 6, as warden targets).
arm64_apt() {
  local a=$VM/apt
  mkdir -p "$a/state/lists/partial" "$a/cache/archives/partial" "$a/prefs"
  [ -f "$a/state/status" ] || : >"$a/state/status"
  cat >"$a/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR bookworm-backports main
EOF
  "$1" -o Dir::State="$a/state" -o Dir::State::status="$a/state/status" \
    -o Dir::Cache="$a/cache" -o Dir::Etc::SourceList="$a/sources.list" \
    -o Dir::Etc::SourceParts=/dev/null -o Dir::Etc::Preferences=/dev/null \
    -o Dir::Etc::PreferencesParts="$a/prefs" \
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 "${@:2}"
}

kernel() {
  [ -f "$VM/kernel/release" ] && return
  say "kernel: Debian's linux-image-arm64 from bookworm-backports"
  arm64_apt apt-get update -qq
  local pkg
  pkg=$(arm64_apt apt-cache depends -t bookworm-backports linux-image-arm64 |
    sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1)
  [ -n "$pkg" ] || die "could not resolve linux-image-arm64 in bookworm-backports"
  rm -rf "$VM/kernel" "$VM/debs" && mkdir -p "$VM/kernel" "$VM/debs"
  (cd "$VM/debs" && arm64_apt apt-get download -qq -t bookworm-backports "$pkg" 2>/dev/null)
  dpkg-deb -x "$VM"/debs/linux-image-*.deb "$VM/kernel"
  rm -rf "$VM/debs"
  basename "$VM"/kernel/lib/modules/* >"$VM/kernel/release"
}

binfmt() {
  # qemu-user-static runs the arm64 maintainer scripts of the second stage. The F flag
  # (in Debian's registration) opens the interpreter now, so it works inside the chroot.
  # What this adds to the host is taken away again (unbinfmt, also on exit).
  trap unbinfmt EXIT
  if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    BINFMT_MOUNTED=1
  fi
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    cat /usr/lib/binfmt.d/qemu-aarch64.conf >/proc/sys/fs/binfmt_misc/register
    BINFMT_ADDED=1
  fi
}

unbinfmt() {
  if [ "${BINFMT_ADDED:-}" = 1 ] && [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    echo -1 >/proc/sys/fs/binfmt_misc/qemu-aarch64 || true
  fi
  if [ "${BINFMT_MOUNTED:-}" = 1 ]; then
    umount /proc/sys/fs/binfmt_misc || true
  fi
  BINFMT_ADDED= BINFMT_MOUNTED=
}

rootfs() {
  local key; key=$ROOTFS_KEY" kernel:$(cat "$VM/kernel/release")"
  [ -f "$VM/rootfs.cpio" ] && [ "$(cat "$VM/rootfs.key" 2>/dev/null)" = "$key" ] && return
  say "root filesystem: debootstrap --arch arm64 --foreign, second stage via qemu-user-static"
  binfmt
  local r=$VM/rootfs
  rm -rf "$r"
  debootstrap --arch arm64 --foreign --variant=minbase --include=python3,iproute2,kmod \
    bookworm "$r" "$MIRROR" >"$VM/debootstrap.log" 2>&1 ||
    die "debootstrap (first stage) failed: see $VM/debootstrap.log"
  chroot "$r" /debootstrap/debootstrap --second-stage >>"$VM/debootstrap.log" 2>&1 ||
    die "debootstrap (second stage) failed: see $VM/debootstrap.log"
  unbinfmt
  # Second stage leaves /proc mounted on failure paths; never archive a mount.
  ! mountpoint -q "$r/proc" || umount "$r/proc"
  chroot "$r" useradd --create-home --uid 1000 --shell /bin/bash warden-test
  mkdir -p "$r/lib/modules"
  cp -a "$VM"/kernel/lib/modules/* "$r/lib/modules/"
  chroot "$r" depmod "$(cat "$VM/kernel/release")"
  rm -rf "$r/var/cache/apt/archives"/*.deb "$r/var/lib/apt/lists"/*
  (cd "$r" && find . -xdev -print0 | cpio --null -o -H newc --quiet) >"$VM/rootfs.cpio.tmp"
  mv "$VM/rootfs.cpio.tmp" "$VM/rootfs.cpio"
  printf '%s\n' "$key" >"$VM/rootfs.key"
  rm -rf "$r"
}

# Cross-builds (debug, like the host's tests) and prints the paths of the two test
# binaries: the library's unit tests and tests/all.
build() {
  local v=${TARGET//-/_}
  export "CARGO_TARGET_${v^^}_LINKER=aarch64-linux-gnu-gcc" \
    "CC_$v=aarch64-linux-gnu-gcc" "AR_$v=aarch64-linux-gnu-ar"
  say "cross-building warden, its unit tests and tests/all for $TARGET"
  # One `cargo test` build: tests/all makes cargo build the binary too, with the same
  # features (a separate `cargo build` would rebuild the dependencies without the
  # dev-dependencies' features).
  nice -n 19 cargo test --target "$TARGET" --lib --test all --no-run \
    --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p'
}

# The VM's first process. Moves the initramfs root onto a bind mount of itself (an
# initramfs root cannot be pivot_root'ed away, and each worker's world does exactly
# that), mounts the usual file systems and hands over to a reaper.
init_script() {
  cat <<'EOF'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
if [ "$1" != moved ]; then
  mkdir -p /newroot
  mount --bind / /newroot
  cd /newroot
  mount --move . /
  exec chroot . /warden-init moved
fi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t securityfs securityfs /sys/kernel/security
mount -t cgroup2 cgroup2 /sys/fs/cgroup
hostname arm64-vm
ip link set lo up
exec python3 /opt/warden/reaper.py /bin/sh /opt/warden/run.sh
EOF
}

# PID 1 after the move: reaps every orphan (the suite counts processes), runs the
# tests, powers the VM off.
reaper_script() {
  cat <<'EOF'
import ctypes, os, sys
child = os.fork()
if child == 0:
    os.execv(sys.argv[1], sys.argv[1:])
while True:
    try:
        pid, _ = os.wait()
    except ChildProcessError:
        break
    if pid == child:
        break
os.sync()
ctypes.CDLL(None).reboot(0x4321FEDC)  # LINUX_REBOOT_CMD_POWER_OFF
EOF
}

# The tests, in the VM. Every result line starts with "ARM64VM ".
run_script() {
  cat <<EOF
#!/bin/sh
ROOT='$ROOT'
SUITE='$SUITE'
EOF
  cat <<'EOF'
W=/opt/warden
say() { echo "ARM64VM $*"; }
say "kernel $(uname -r) $(uname -m), $(nproc) CPUs, $(python3 -c 'import platform; print("Python", platform.python_version())')"
say "lsm $(cat /sys/kernel/security/lsm)"
modprobe veth || say "modprobe veth failed: the suite's isolated network namespaces need it"
result() { say "RESULT $1 $2 ($3 s)"; }
selftest() {
  who=$1; shift
  start=$(date +%s)
  "$@" "$ROOT/target/aarch64-unknown-linux-gnu/debug/warden" selftest >/tmp/selftest-$who.json 2>/tmp/selftest-$who.err
  rc=$?
  python3 $W/judge.py "$who" /tmp/selftest-$who.json $rc || { rc=1; sed 's/^/ARM64VM   stderr: /' /tmp/selftest-$who.err | tail -n 20; }
  [ $rc = 0 ] && result "selftest-$who" PASS $(( $(date +%s) - start )) || result "selftest-$who" FAIL $(( $(date +%s) - start ))
}
# A ~/.ssh for each server user, so that fs.ssh_dir is judged rather than inconclusive.
for home in /root /home/warden-test; do
  mkdir -p $home/.ssh && echo "ssh-ed25519 AAAA-canary arm64-vm" >$home/.ssh/id_ed25519
  chmod 700 $home/.ssh && chmod 600 $home/.ssh/id_ed25519
done
chown -R warden-test: /home/warden-test/.ssh
selftest root env HOME=/root
selftest user setpriv --reuid=1000 --regid=1000 --clear-groups env HOME=/home/warden-test USER=warden-test LOGNAME=warden-test
if [ "$SUITE" != none ]; then
  start=$(date +%s)
  cd "$ROOT"
  # Deadlines for the server's clean-up times 10: TCG runs this code about that much slower.
  WARDEN_TEST_USER=warden-test CI=true RUST_BACKTRACE=0 WARDEN_TEST_SLOWDOWN=10 $W/suite $SUITE --test-threads=1 >/tmp/suite.log 2>&1
  rc=$?
  grep -aE '^test .* (ok|FAILED|ignored)$|^test result' /tmp/suite.log | sed 's/^/ARM64VM   /'
  [ $rc = 0 ] && result "suite($SUITE)" PASS $(( $(date +%s) - start )) || {
    sed -n '/^failures:/,/^test result/p' /tmp/suite.log | head -n 80 | sed 's/^/ARM64VM   /'
    result "suite($SUITE)" FAIL $(( $(date +%s) - start ))
  }
fi
start=$(date +%s)
cd /tmp
RUST_BACKTRACE=0 $W/libtests --test-threads=2 >/tmp/lib.log 2>&1
rc=$?
grep -aE '^test result' /tmp/lib.log | sed 's/^/ARM64VM   /'
[ $rc = 0 ] && result "lib-tests" PASS $(( $(date +%s) - start )) || {
  sed -n '/^failures:/,/^test result/p' /tmp/lib.log | head -n 80 | sed 's/^/ARM64VM   /'
  result lib-tests FAIL $(( $(date +%s) - start ))
}
say DONE
EOF
}

# Judges one selftest report: every required probe blocked, and each wall the kernel
# lacks named with its reason (never assumed present).
judge_script() {
  cat <<'EOF'
import json, sys
who, path, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
def say(s): print("ARM64VM   " + s)
try:
    r = json.load(open(path))
except Exception as e:
    say(f"selftest {who}: no report ({e}), exit status {rc}")
    sys.exit(1)
probes = r.get("probes", [])
blocked = [p["id"] for p in probes if p["status"] == "blocked"]
other = [p for p in probes if p["status"] != "blocked"]
say(f"selftest {who}: exit {rc}, landlock_abi {r.get('landlock_abi')}, {len(blocked)}/{len(probes)} probes blocked")
for p in other:
    say(f"  {p['id']}: {p['status']} ({'required' if p['required'] else 'not required'}): {p['details']}")
walls = r.get("walls", [])
say("  walls enforced: " + ", ".join(w["name"] for w in walls if w.get("enforced")))
for w in walls:
    if not w.get("enforced"):
        say(f"  wall missing: {w['name']}: {w.get('detail')}")
say(f"  seccomp: {r.get('seccomp')}")
failing = r.get("failing_required") or [p["id"] for p in other if p["required"]]
ok = rc == 0 and not failing and not r.get("worker_error")
if not ok:
    say(f"  failing required: {failing}, worker_error: {r.get('worker_error')}")
sys.exit(0 if ok else 1)
EOF
}

payload() {
  local lib=$1 suite=$2 p=$VM/payload
  rm -rf "$p" && mkdir -p "$p/opt/warden" "$p$ROOT/target/$TARGET/debug" "$p$ROOT/tests"
  init_script >"$p/warden-init" && chmod 755 "$p/warden-init"
  reaper_script >"$p/opt/warden/reaper.py"
  run_script >"$p/opt/warden/run.sh"
  judge_script >"$p/opt/warden/judge.py"
  cp "$lib" "$p/opt/warden/libtests"
  cp "$suite" "$p/opt/warden/suite"
  # The suite finds the binary and the corpus by the paths they had at build time.
  cp "target/$TARGET/debug/warden" "$p$ROOT/target/$TARGET/debug/warden"
  cp -r tests/corpus "$p$ROOT/tests/"
  cp -r policies README.md "$p$ROOT/"  # the unit tests read these two too
  chmod -R go+rX "$p"
  # The kernel unpacks concatenated newc archives in order: the payload lands on top.
  (cd "$p" && find . -print0 | cpio --null -o -H newc --quiet) >"$VM/payload.cpio"
  cat "$VM/rootfs.cpio" "$VM/payload.cpio" >"$VM/initrd.cpio"
  rm -rf "$p" "$VM/payload.cpio"
}

boot() {
  say "booting: qemu-system-aarch64 -M virt -cpu cortex-a72 -smp $SMP (TCG), no network device"
  local start=$SECONDS
  # No network device at all: nothing in the VM can reach beyond it. The kernel panics
  # if PID 1 ever exits; -no-reboot turns that into the end of QEMU, not a loop.
  timeout --foreground "$TIMEOUT" nice -n 19 qemu-system-aarch64 \
    -M virt -cpu cortex-a72 -smp "$SMP" -m 3072 -accel tcg,thread=multi \
    -nodefaults -nic none -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VM/kernel/boot/vmlinuz-$(cat "$VM/kernel/release")" -initrd "$VM/initrd.cpio" \
    -append "console=ttyAMA0 rdinit=/warden-init panic=-1 quiet loglevel=3" \
    </dev/null >"$VM/console.log" 2>&1 || say "qemu ended with status $? (124: timed out after ${TIMEOUT}s)"
  rm -f "$VM/initrd.cpio"
  echo $((SECONDS - start)) >"$VM/boot.seconds"
}

summary() {
  local log=$VM/console.log
  echo
  echo "arm64 VM run, $(date -u '+%Y-%m-%d %H:%M UTC'), $(cat "$VM/boot.seconds") s in the VM (full console: $log)"
  grep -a '^ARM64VM ' "$log" | sed 's/^ARM64VM //' | tr -d '\r'
  local fails passes
  fails=$(grep -ac '^ARM64VM RESULT .* FAIL ' "$log" || true)
  passes=$(grep -ac '^ARM64VM RESULT .* PASS ' "$log" || true)
  if ! grep -aq '^ARM64VM DONE' "$log"; then
    echo "arm64 VM: FAILED (the run did not finish; see $log)"
    return 1
  fi
  if [ "$fails" != 0 ] || [ "$passes" = 0 ]; then
    echo "arm64 VM: FAILED ($fails failed, $passes passed)"
    return 1
  fi
  echo "arm64 VM: PASSED ($passes steps); disk used by $VM: $(du -sh "$VM" | cut -f1)"
}

main() {
  host_packages
  kernel
  rootfs
  local bins lib suite
  mapfile -t bins < <(build)
  lib=$(printf '%s\n' "${bins[@]}" | grep '/deps/warden-' | head -n1)
  suite=$(printf '%s\n' "${bins[@]}" | grep '/deps/all-' | head -n1)
  [ -n "$lib" ] && [ -n "$suite" ] || die "cross-build did not yield both test binaries: ${bins[*]}"
  payload "$lib" "$suite"
  boot
  summary
}

# Parsed whole before it runs: editing this file during a run cannot change the run.
main "$@"
exit
