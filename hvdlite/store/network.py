"""This host's network addresses: which ones the launcher offers to remote
hosts for the rendezvous store, and the address of a named interface."""
import socket

import psutil


class NetworkError(ValueError):
    """A named interface does not exist here or has no IPv4 address."""


def ipv4_addresses():
    """{interface name: [IPv4 addresses]} of the interfaces that are up."""
    stats = psutil.net_if_stats()
    found = {}
    for name, addresses in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        ipv4 = [a.address for a in addresses if a.family == socket.AF_INET]
        if ipv4:
            found[name] = ipv4
    return found


def interface_address(names):
    """The first IPv4 address of the first interface in `names` this host has."""
    available = ipv4_addresses()
    for name in names:
        if name in available:
            return available[name][0]
    listing = ", ".join(f"{n} ({', '.join(a)})" for n, a in sorted(available.items()))
    raise NetworkError(f"host {socket.gethostname()} has no interface named "
                       f"{' or '.join(names)} with an IPv4 address that is up; it has: "
                       f"{listing or 'none'}")


def store_candidates(names=None):
    """Addresses remote hosts may reach the launcher at: those of the named
    interfaces, or every non-loopback IPv4 address of this host."""
    if names:
        available = ipv4_addresses()
        addresses = [a for n in names for a in available.get(n, [])]
        if not addresses:
            interface_address(names)  # raises, listing what there is
        return addresses
    addresses = [a for n, found in sorted(ipv4_addresses().items()) for a in found
                 if not a.startswith("127.")]
    if not addresses:
        raise NetworkError(f"host {socket.gethostname()} has no network address other "
                           f"than loopback, so remote hosts cannot reach it")
    return addresses
