//! Which addresses may send GPU use reports: the nodes of slurmctld's node table, each at the
//! addresses its `NodeAddr` and `NodeHostname` resolve to.
//!
//! The scheduler thread copies the names from the node table (under the node read lock) and
//! posts them; the listener thread resolves them (DNS, never under a slurmctld lock) when they
//! change. A datagram from any other address is dropped before munge sees it.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};

/// One node as slurmctld's node table has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddresses {
    /// `NodeName`, as reports name the node.
    pub name: String,
    /// What the node is reached at: `NodeAddr`, `NodeHostname` (names or address literals).
    pub hosts: Vec<String>,
}

/// The known senders: node names by source address.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    nodes_at: HashMap<IpAddr, Vec<String>>,
}

impl Sources {
    /// Resolves every host of every node (all its addresses); a host that does not resolve
    /// adds nothing.
    pub fn resolve(nodes: &[NodeAddresses]) -> Sources {
        let mut cache: HashMap<&str, Vec<IpAddr>> = HashMap::new();
        let mut s = Sources::default();
        for node in nodes {
            for host in &node.hosts {
                let ips = cache.entry(host.as_str()).or_insert_with(|| addresses_of(host));
                for ip in ips.iter() {
                    let names = s.nodes_at.entry(*ip).or_default();
                    if !names.contains(&node.name) {
                        names.push(node.name.clone());
                    }
                }
            }
        }
        s
    }

    /// Is `ip` the address of some node?
    pub fn knows(&self, ip: IpAddr) -> bool {
        self.nodes_at.contains_key(&ip.to_canonical())
    }

    /// Is `ip` an address of node `name`?
    pub fn is_node_at(&self, name: &str, ip: IpAddr) -> bool {
        self.nodes_at.get(&ip.to_canonical()).is_some_and(|n| n.iter().any(|x| x == name))
    }

    /// How many addresses are known.
    pub fn len(&self) -> usize {
        self.nodes_at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes_at.is_empty()
    }
}

fn addresses_of(host: &str) -> Vec<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![ip.to_canonical()];
    }
    let mut ips: Vec<IpAddr> = (host, 0).to_socket_addrs().map(|a| a.map(|s| s.ip().to_canonical()).collect()).unwrap_or_default();
    ips.sort_unstable();
    ips.dedup();
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, hosts: &[&str]) -> NodeAddresses {
        NodeAddresses { name: name.into(), hosts: hosts.iter().map(|h| h.to_string()).collect() }
    }

    #[test]
    fn nodes_are_known_at_each_address_they_resolve_to() {
        let s = Sources::resolve(&[node("n1", &["10.0.0.1", "localhost"]), node("n2", &["10.0.0.2", "no-such-host.invalid"]), node("n3", &["10.0.0.1"])]);
        let ip = |t: &str| t.parse::<IpAddr>().expect("ip");
        assert!(s.knows(ip("10.0.0.1")) && s.knows(ip("10.0.0.2")) && s.knows(ip("127.0.0.1")));
        assert!(s.knows(ip("::ffff:10.0.0.2")), "a v4 peer on a dual-stack socket");
        assert!(!s.knows(ip("10.0.0.3")));
        assert!(s.is_node_at("n1", ip("127.0.0.1")) && s.is_node_at("n1", ip("10.0.0.1")) && s.is_node_at("n3", ip("10.0.0.1")));
        assert!(!s.is_node_at("n2", ip("10.0.0.1")), "n2 is not at n1's address");
        assert!(!s.is_node_at("n9", ip("10.0.0.1")));
    }
}
