"""A free TCP port for a store or rendezvous that is bound later (the
elastic leader's TCPStore, a test's MASTER_PORT): taken below the kernel's
ephemeral range, so that the ports other programs get from bind(port 0)
and from connect() cannot land on it before it is bound. The C++ twin is
common/quiet_port.h (the launcher's MASTER_PORT).
"""
import random
import socket

_LINUX_DEFAULT = (32768, 60999)


def ephemeral_range(text=None):
    """(first, last) of /proc/sys/net/ipv4/ip_local_port_range, or Linux's
    default where it cannot be read or is not two ports in order."""
    if text is None:
        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
                text = f.read()
        except OSError:
            return _LINUX_DEFAULT
    try:
        first, last = (int(x) for x in text.split())
    except ValueError:
        return _LINUX_DEFAULT
    if 1 <= first <= last <= 65535:
        return first, last
    return _LINUX_DEFAULT


def _bindable(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def quiet_port(host="127.0.0.1", count=1):
    """A port P on `host` where P .. P + count - 1 could all be bound just
    now: random in the 10000 below the ephemeral range (not below 1024),
    else from bind(port 0). OSError when none can be found."""
    count = max(int(count), 1)
    first = ephemeral_range()[0]
    lo, hi = max(1024, first - 10000), first - count
    if hi >= lo:
        for _ in range(200):
            p = random.randint(lo, hi)
            if all(_bindable(host, q) for q in range(p, p + count)):
                return p
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(200):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            p = s.getsockname()[1]
        if p + count - 1 <= 65535 and all(
                _bindable(host, q) for q in range(p, p + count)):
            return p
    raise OSError(f"no {count} free consecutive ports on {host}")
