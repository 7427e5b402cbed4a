fn main() {
    println!("nutanix-machine-controller {}", env!("CARGO_PKG_VERSION"));
}
