/// The sum of the numbers.
pub fn sum(xs: &[i64]) -> i64 {
    xs.iter().sum()
}

/// The largest number, or 0 for none.
pub fn largest(xs: &[i64]) -> i64 {
    let mut best = 0;
    for &x in xs {
        if x > best {
            best = x;
        }
    }
    best
}
