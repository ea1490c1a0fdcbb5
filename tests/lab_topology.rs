//! The lab's namespaces and delay box: RTTs as configured (generously bounded: shared noisy
//! machines), nothing left behind after drop or after a SIGKILL.

use std::process::{Command, Stdio};
use std::time::Duration;

use edgewarm::lab::netns::{self, Topology, CLIENT, EDGE_A, ORIGIN};

/// Median TCP connect time from `from` to a listener at `to` in namespace `to_ns`, in ms.
fn connect_rtt(topo: &Topology, from: &str, to_ns: &str, to: std::net::Ipv4Addr) -> f64 {
    let listener = format!(
        "import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('{to}',7777));s.listen(64)\nwhile True:\n  c,_=s.accept();c.close()"
    );
    let mut server = topo.command(to_ns, &["python3", "-c", &listener]).stdout(Stdio::null()).spawn().unwrap();
    let probe = format!(
        "import socket,time\nr=[]\nfor i in range(9):\n  for a in range(100):\n    try:\n      s=socket.socket();t=time.perf_counter();s.connect(('{to}',7777));r.append(time.perf_counter()-t);s.close();break\n    except OSError:\n      time.sleep(0.05)\nr.sort();print(r[len(r)//2]*1000)"
    );
    let out = topo.command(from, &["python3", "-c", &probe]).output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("{out:?}"))
}

#[test]
fn rtts_match_the_configuration_and_nothing_is_left_behind() {
    let (r, big_r) = (Duration::from_millis(20), Duration::from_millis(60));
    let topo = Topology::create(r, big_r).expect("the lab needs root");
    let names = [topo.client.clone(), topo.edge.clone(), topo.origin.clone()];
    let to_edge = connect_rtt(&topo, &topo.client, &topo.edge, EDGE_A);
    let direct = connect_rtt(&topo, &topo.client, &topo.origin, ORIGIN);
    println!(
        "client→edge {to_edge:.2} ms (r = 20), client→origin {direct:.2} ms (r + R = 80), max late {} µs",
        topo.max_late_us()
    );
    assert!((20.0..35.0).contains(&to_edge), "client→edge RTT {to_edge} ms for r = 20 ms");
    assert!((80.0..95.0).contains(&direct), "client→origin RTT {direct} ms for r + R = 80 ms");
    let tfo = topo.command(&topo.client, &["sysctl", "-n", "net.ipv4.tcp_fastopen"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&tfo.stdout).trim(), "3");
    let _ = CLIENT;
    drop(topo);
    let list = String::from_utf8(netns::run(&["ip", "netns", "list"]).unwrap().stdout).unwrap();
    for n in &names {
        assert!(!list.contains(n.as_str()), "{n} left behind: {list}");
    }
}
