//! The loopback ports the control plane's programs listen on.

use std::net::TcpListener;

use super::{RealClusterError, io_error};

/// Where this process hands out ports: below the kernel's ephemeral range, so that no outgoing
/// connection (of which the tests open thousands) takes a port between its choice here and the
/// program's bind. Ports bound with `:0` come from the ephemeral range, and a released one may
/// be a connection's source port a moment later: MAO's `machineset` once exited on CI that way.
const PORT_POOL_START: u16 = 20000;

/// The first port of the ephemeral range (`net.ipv4.ip_local_port_range`; 32768 when unreadable,
/// Linux's default).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The next port below the ephemeral range no one holds now; each is handed out once per
/// process, from an offset of the process id so that two test processes seldom try the same
/// ports.
pub(super) fn free_port() -> Result<u16, RealClusterError> {
    static POOL: std::sync::OnceLock<PortPool> = std::sync::OnceLock::new();
    let end = ephemeral_start();
    if end <= PORT_POOL_START {
        // No room below the range: fall back to the kernel's choice.
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io_error("bind a free port"))?;
        return Ok(listener
            .local_addr()
            .map_err(io_error("read a free port"))?
            .port());
    }
    POOL.get_or_init(|| {
        let size = u32::from(end - PORT_POOL_START);
        PortPool::new(
            PORT_POOL_START,
            end,
            std::process::id().wrapping_mul(7919) % size,
        )
    })
    .take()
}

/// Ports `start..end`, handed out in turn from `next`, each skipped while someone holds it.
#[derive(Debug)]
struct PortPool {
    start: u16,
    end: u16,
    next: std::sync::atomic::AtomicU32,
}

impl PortPool {
    fn new(start: u16, end: u16, first_offset: u32) -> Self {
        Self {
            start,
            end,
            next: std::sync::atomic::AtomicU32::new(first_offset),
        }
    }

    fn take(&self) -> Result<u16, RealClusterError> {
        let size = u32::from(self.end.saturating_sub(self.start));
        for _ in 0..size {
            let offset = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % size;
            let Ok(port) = u16::try_from(u32::from(self.start) + offset) else {
                continue;
            };
            // Free on loopback and on every address: MAO's webhook server binds all of them.
            if TcpListener::bind(("127.0.0.1", port)).is_ok()
                && TcpListener::bind(("0.0.0.0", port)).is_ok()
            {
                return Ok(port);
            }
        }
        Err(RealClusterError::NoFreePort {
            start: self.start,
            end: self.end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_handed_out_once_below_the_ephemeral_range() {
        let end = ephemeral_start();
        let ports: Vec<u16> = (0..64).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        if end > PORT_POOL_START {
            assert!(
                ports.iter().all(|p| (PORT_POOL_START..end).contains(p)),
                "{ports:?} not in {PORT_POOL_START}..{end}"
            );
        }
    }

    #[test]
    fn a_held_port_is_skipped_and_a_full_pool_says_so() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let pool = PortPool::new(port, port + 2, 0);
        assert_eq!(pool.take().unwrap(), port + 1);
        let full = PortPool::new(port, port + 1, 0);
        assert!(matches!(
            full.take(),
            Err(RealClusterError::NoFreePort { .. })
        ));
    }
}
