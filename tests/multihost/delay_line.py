"""A delay line between two interfaces, for kernels without `tc netem` (CONFIG_NET_SCH_NETEM
unset, as in some VMs): every frame that arrives on one interface leaves on the other DELAY_MS
later, both ways, in order. Used by tests/multihost/netbed.py (NetBed.delay) inside the bed's
switch namespace, between a host's port and a veth pair whose far end is on the bridge.

    delay_line.py IF_A IF_B DELAY_MS

Frames are read and written with AF_PACKET sockets carrying a virtio-net header
(PACKET_VNET_HDR), so segmentation-offloaded frames of up to 64 KiB pass whole, with their
checksum state, as a veth would hand them over. Runs until SIGTERM or SIGINT; exits 2 on a
bad argument, 1 when an interface cannot be opened (the message names it)."""

import heapq
import select
import signal
import socket
import sys
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_OUTGOING = 4
MAX_FRAME = 10 + 65536 + 14  # virtio-net header + a GSO frame + its Ethernet header


def open_interface(name):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    s.bind((name, ETH_P_ALL))
    s.setblocking(False)
    return s


def main(argv):
    if len(argv) != 4 or not argv[3].isdigit():
        print("usage: delay_line.py IF_A IF_B DELAY_MS", file=sys.stderr)
        return 2
    delay = int(argv[3]) / 1000.0
    try:
        a, b = open_interface(argv[1]), open_interface(argv[2])
    except OSError as e:
        print("delay_line: cannot open %s / %s: %s" % (argv[1], argv[2], e), file=sys.stderr)
        return 1
    peer = {a: b, b: a}
    due = []  # (time to send, sequence, socket to send on, frame)
    seq = 0
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    while not stopping:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else 0.5
        try:
            readable, _, _ = select.select([a, b], [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for s in readable:
            while True:
                try:
                    frame, address = s.recvfrom(MAX_FRAME)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING:  # what this line itself sent on s
                    continue
                heapq.heappush(due, (now + delay, seq, peer[s], frame))
                seq += 1
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, out, frame = heapq.heappop(due)
            try:
                out.send(frame)
            except OSError:  # a full queue or a link down: the frame is lost, as on a wire
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
