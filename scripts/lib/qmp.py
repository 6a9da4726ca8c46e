#!/usr/bin/env python3
"""qmp.py SOCKET COMMAND [ARGUMENTS-JSON]: one QMP command to a running QEMU.

QEMU listens with `-qmp unix:SOCKET,server=on,wait=off`. Prints the reply's `return` as JSON;
exits 1 with QEMU's error text if the command failed, 2 on a bad command line or socket.
scripts/kmod-test.sh uses it to unplug the lost ivshmem device and plug a restarted one.
"""
import json
import socket
import sys


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    path, command = sys.argv[1], sys.argv[2]
    try:
        arguments = json.loads(sys.argv[3]) if len(sys.argv) == 4 else {}
    except json.JSONDecodeError as e:
        print(f"qmp: ARGUMENTS-JSON: {e}", file=sys.stderr)
        return 2
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(path)
    except OSError as e:
        print(f"qmp: cannot reach QEMU at {path}: {e}", file=sys.stderr)
        return 2
    f = s.makefile("rw")

    def reply() -> dict:
        # Events (asynchronous) may come before the reply: skip them.
        while True:
            line = f.readline()
            if not line:
                raise OSError("QEMU closed the QMP socket")
            msg = json.loads(line)
            if "event" not in msg:
                return msg

    def send(cmd: str, args: dict) -> dict:
        f.write(json.dumps({"execute": cmd, "arguments": args}) + "\n")
        f.flush()
        return reply()

    try:
        reply()  # the greeting
        send("qmp_capabilities", {})
        r = send(command, arguments)
    except (OSError, ValueError) as e:
        print(f"qmp: {command}: {e}", file=sys.stderr)
        return 2
    if "error" in r:
        print(f"qmp: {command}: {r['error'].get('desc', r['error'])}", file=sys.stderr)
        return 1
    print(json.dumps(r.get("return", {})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
