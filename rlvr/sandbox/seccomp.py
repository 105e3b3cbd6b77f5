"""A classic-BPF seccomp filter for the sandbox, assembled here (no libseccomp needed).

bubblewrap loads it (`--seccomp FD`) just before it executes the interpreter, so it binds the harness
and everything the program starts. Denied calls fail with EPERM (the program sees an ordinary error,
nothing is killed). In the spirit of container runtimes' default profiles, it denies:
- keyctl, add_key, request_key: the kernel keyring is not namespaced by bwrap; a program could read,
  plant or clear keys in the caller's session keyring;
- SysV IPC (shm*, sem*, msg*): a segment outlives the process that made it and is charged to no
  process, so no rlimit bounds it;
- memfd_create: pages written into a memfd without mapping it are not counted by RLIMIT_AS;
- ptrace, process_vm_readv/writev, kcmp, perf_event_open, userfaultfd, bpf: inspecting other
  processes, side channels, and the usual helpers of kernel exploits;
- mount, umount2, pivot_root, unshare, setns, io_uring_*, kexec, modules, reboot, swap, acct, syslog,
  open_by_handle_at, iopl/ioperm: nothing a test program needs; most already need a capability the
  sandbox lacks, and the filter holds even if one were granted by mistake.
Calls from another ABI (i386 via int 0x80, x32) are denied wholesale: their numbers differ, so a
deny list written for the native ABI would not cover them.
"""
from __future__ import annotations

import platform
import struct

EPERM = 1
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_X32_BIT = 0x40000000

# name -> number, per architecture (from the kernel's syscall tables).
_X86_64 = {
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101, "perf_event_open": 298,
    "userfaultfd": 323, "memfd_create": 319, "process_vm_readv": 310, "process_vm_writev": 311,
    "kcmp": 312, "bpf": 321, "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272,
    "setns": 308, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "syslog": 103,
    "open_by_handle_at": 304, "iopl": 172, "ioperm": 173,
}
_AARCH64 = {
    "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191,
    "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
    "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117, "perf_event_open": 241,
    "userfaultfd": 282, "memfd_create": 279, "process_vm_readv": 270, "process_vm_writev": 271,
    "kcmp": 272, "bpf": 280, "mount": 40, "umount2": 39, "pivot_root": 41, "unshare": 97, "setns": 268,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 104,
    "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "syslog": 116, "open_by_handle_at": 265,
}
# machine -> (AUDIT_ARCH_*, table, has the x32 ABI)
ARCHES = {"x86_64": (0xC000003E, _X86_64, True), "aarch64": (0xC00000B7, _AARCH64, False)}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)   # struct sock_filter, native byte order


def deny_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter for this machine, or None when there is no table for it (the caller
    then runs without one and says so). Layout:
        load arch; if not native: deny
        load nr; if x32 bit set: deny
        for each denied nr: if equal: deny
        allow
        deny: return ERRNO(EPERM)
    """
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, table, x32 = arch
    numbers = sorted(set(table.values()))
    body = [(_LD_ABS_W, 4), ("jne_deny", audit_arch), (_LD_ABS_W, 0)]   # seccomp_data.arch, .nr
    if x32:
        body.append(("jge_deny", _X32_BIT))
    body += [("jeq_deny", n) for n in numbers]
    deny_at = len(body) + 1                     # after the final allow
    prog = []
    for i, (op, k) in enumerate(body):
        skip = deny_at - i - 1                  # jumps are relative to the next instruction
        if op == "jne_deny":
            prog.append(_insn(_JEQ_K, 0, skip, k))
        elif op == "jge_deny":
            prog.append(_insn(_JGE_K, skip, 0, k))
        elif op == "jeq_deny":
            prog.append(_insn(_JEQ_K, skip, 0, k))
        else:
            prog.append(_insn(op, 0, 0, k))
    prog.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    prog.append(_insn(_RET_K, 0, 0, _RET_ERRNO | EPERM))
    if len(prog) > 255:  # the jumps are 8 bits wide
        raise ValueError("seccomp deny list too long for 8-bit jumps")
    return b"".join(prog)
