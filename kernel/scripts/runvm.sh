#!/bin/bash
# runvm.sh BZIMAGE INITRAMFS LABEL LOG
# Boot one kernel under QEMU TCG and capture the serial console in LOG.
# One vCPU: the build machine has two cores and is shared.
set -o pipefail
kernel=$1 initrd=$2 label=$3 log=$4
[ -f "$kernel" ] || { echo "runvm: no kernel $kernel (make build)" >&2; exit 1; }
echo "=== booting $label kernel: $kernel"
timeout ${VM_TIMEOUT:-1200} qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 2G \
	-nographic -no-reboot -monitor none -serial stdio \
	-kernel "$kernel" -initrd "$initrd" \
	-append "console=ttyS0 panic=-1 loglevel=4 tsc=reliable $VM_APPEND" </dev/null | sed -u 's/\r$//' | tee "$log"
grep -q VMTEST-END "$log"
