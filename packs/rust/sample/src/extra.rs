pub fn one() -> i64 {
    1
}
