//! A Zipf distribution over ranks 1..=n: P(k) proportional to 1 / k^s. Used for
//! the Zipfian tree's directory sizes and for Zipfian file choice (seed 000
//! §4.1, exponent 1.8).

use rand::Rng;

pub struct Zipf {
    /// cdf[k-1] = P(rank <= k).
    cdf: Vec<f64>,
}

impl Zipf {
    /// Ranks 1..=n (n at least 1) with exponent `s`.
    pub fn new(n: usize, s: f64) -> Zipf {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// A rank in 1..=n.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn rank_one_is_drawn_as_often_as_the_exponent_says() {
        let z = Zipf::new(1000, 1.8);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let draws = 100_000;
        let mut counts = vec![0usize; 1001];
        for _ in 0..draws {
            counts[z.sample(&mut rng)] += 1;
        }
        assert_eq!(counts[0], 0, "ranks start at 1");
        // P(1) = 1 / sum_k k^-1.8, about 0.56 for n = 1000; P(2) = P(1) / 2^1.8.
        let norm: f64 = (1..=1000).map(|k| 1.0 / (k as f64).powf(1.8)).sum();
        let p1 = 1.0 / norm;
        let seen1 = counts[1] as f64 / draws as f64;
        assert!((seen1 - p1).abs() < 0.01, "{seen1} vs {p1}");
        let ratio = counts[1] as f64 / counts[2] as f64;
        assert!((ratio - 2f64.powf(1.8)).abs() < 0.2, "{ratio}");
    }

    #[test]
    fn one_rank_is_always_that_rank() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        assert!((0..100).all(|_| Zipf::new(1, 1.8).sample(&mut rng) == 1));
    }
}
