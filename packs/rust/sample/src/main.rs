mod extra;
mod stats;

fn main() {
    let xs = vec![3, 8, 5];
    let total = stats::sum(&xs);
    let largest = stats::largest(&xs);
    println!("{} {} {}", total, largest, extra::one());
}
