//! IPv4 networks and address pools.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// An IPv4 network `a.b.c.d/len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ipv4Net {
    pub(crate) network: u32,
    pub(crate) prefix_len: u8,
}

impl Ipv4Net {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (addr, len) = text.split_once('/')?;
        let addr: Ipv4Addr = addr.trim().parse().ok()?;
        let prefix_len: u8 = len.trim().parse().ok()?;
        if prefix_len > 32 {
            return None;
        }
        let mask = Self::mask_of(prefix_len);
        Some(Self {
            network: u32::from(addr) & mask,
            prefix_len,
        })
    }

    fn mask_of(prefix_len: u8) -> u32 {
        if prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix_len))
        }
    }

    pub(crate) fn contains(&self, addr: u32) -> bool {
        addr & Self::mask_of(self.prefix_len) == self.network
    }

    pub(crate) fn address(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.network)
    }

    /// The `index`-th host address (wrapping inside the network), skipping the network address.
    pub(crate) fn host(&self, index: u64) -> Ipv4Addr {
        let size = 1u64 << (32 - u32::from(self.prefix_len));
        let usable = size.saturating_sub(2).max(1);
        let offset = 1 + (index % usable);
        Ipv4Addr::from(
            self.network
                .wrapping_add(u32::try_from(offset).unwrap_or(1)),
        )
    }
}

/// The address pool of one subnet: addresses are handed out lowest-free first, and kept per NIC until the VM
/// is deleted (a DHCP reservation, in effect).
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    pub(crate) net: Ipv4Net,
    start: u32,
    end: u32,
    used: BTreeSet<u32>,
    cursor: u32,
}

impl Pool {
    pub(crate) fn new(net: Ipv4Net, start: Ipv4Addr, end: Ipv4Addr) -> Option<Self> {
        let (start, end) = (u32::from(start), u32::from(end));
        if start > end || !net.contains(start) || !net.contains(end) {
            return None;
        }
        Some(Self {
            net,
            start,
            end,
            used: BTreeSet::new(),
            cursor: start,
        })
    }

    /// Reserves a specific address (an ASSIGNED IP, or the gateway). False if already taken.
    pub(crate) fn reserve(&mut self, addr: u32) -> bool {
        self.used.insert(addr)
    }

    pub(crate) fn is_used(&self, addr: u32) -> bool {
        self.used.contains(&addr)
    }

    /// Next free pool address, searching from a cursor so a long run of allocations stays cheap.
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        let size = u64::from(self.end - self.start) + 1;
        let mut candidate = self.cursor;
        for _ in 0..size {
            if !self.used.contains(&candidate) {
                self.used.insert(candidate);
                self.cursor = if candidate == self.end {
                    self.start
                } else {
                    candidate + 1
                };
                return Some(candidate);
            }
            candidate = if candidate == self.end {
                self.start
            } else {
                candidate + 1
            };
        }
        None
    }

    pub(crate) fn release(&mut self, addr: u32) {
        self.used.remove(&addr);
    }

    /// (addresses in the pool range, of which free).
    pub(crate) fn usage(&self) -> (u64, u64) {
        let total = u64::from(self.end - self.start) + 1;
        let used = self.used.range(self.start..=self.end).count() as u64;
        (total, total.saturating_sub(used))
    }

    /// Addresses in use in the whole subnet (pool or not: the gateway, ASSIGNED IPs).
    pub(crate) fn in_use(&self) -> u64 {
        self.used.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_each_address_once_then_reuses_released_ones() {
        let net = Ipv4Net::parse("10.0.0.0/24").unwrap();
        let mut pool = Pool::new(
            net,
            Ipv4Addr::new(10, 0, 0, 10),
            Ipv4Addr::new(10, 0, 0, 12),
        )
        .unwrap();
        assert!(pool.reserve(u32::from(Ipv4Addr::new(10, 0, 0, 11))));
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!(Ipv4Addr::from(a), Ipv4Addr::new(10, 0, 0, 10));
        assert_eq!(Ipv4Addr::from(b), Ipv4Addr::new(10, 0, 0, 12));
        assert_eq!(pool.allocate(), None);
        pool.release(a);
        assert_eq!(pool.allocate(), Some(a));
    }

    #[test]
    fn network_parsing_and_membership() {
        let net = Ipv4Net::parse("10.40.3.7/20").unwrap();
        assert_eq!(net.address(), Ipv4Addr::new(10, 40, 0, 0));
        assert!(net.contains(u32::from(Ipv4Addr::new(10, 40, 15, 255))));
        assert!(!net.contains(u32::from(Ipv4Addr::new(10, 40, 16, 0))));
        assert!(Ipv4Net::parse("10.0.0.0/33").is_none());
        assert!(
            Pool::new(
                net,
                Ipv4Addr::new(10, 40, 1, 0),
                Ipv4Addr::new(10, 41, 0, 0)
            )
            .is_none()
        );
        assert_eq!(net.host(0), Ipv4Addr::new(10, 40, 0, 1));
    }
}
