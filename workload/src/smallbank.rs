//! SmallBank (Cahill et al.; FORD's and Motor's headline OLTP workload):
//! customers with a savings and a checking account each, and six
//! transaction types drawn at 15/15/15/25/15/15 %.
//!
//! | type            | share | reads                         | writes                     |
//! |-----------------|------:|-------------------------------|----------------------------|
//! | Amalgamate      | 15 %  | savings(a), checking(a), checking(b) | all three           |
//! | Balance         | 15 %  | savings(a), checking(a)       | none                       |
//! | DepositChecking | 15 %  | checking(a)                   | checking(a)                |
//! | SendPayment     | 25 %  | checking(a), checking(b)      | both (unless a lacks funds)|
//! | TransactSavings | 15 %  | savings(a)                    | savings(a)                 |
//! | WriteCheck      | 15 %  | savings(a), checking(a)       | checking(a)                |
//!
//! **Skew** (FORD's `TX_HOT` rule): each account a transaction names is
//! drawn, with probability [`HOT_PERCENT`] %, uniformly from the hot set
//! (the first [`hot_accounts`] accounts: 4 % of them, FORD's 4,000 of
//! 100,000), and otherwise uniformly from all accounts. The two accounts of
//! Amalgamate and SendPayment are distinct.
//!
//! **Amounts** are whole cents, FORD's amounts ×100: a deposit is 1.30, a
//! payment 5.00, a savings transaction 20.20, a check 5.00.
//!
//! A generator's stream is a function of `(spec, stream)` alone.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::perm::splitmix64;

/// Percent of account choices that go to the hot set (FORD's `TX_HOT`).
pub const HOT_PERCENT: u32 = 90;
/// The hot set's share of the accounts, in percent (FORD: 4,000 of 100,000).
pub const HOT_SHARE_PERCENT: u64 = 4;
/// Cents a DepositChecking adds to checking (FORD: 1.3).
pub const DEPOSIT_CENTS: i64 = 130;
/// Cents a SendPayment moves (FORD: 5.0).
pub const PAYMENT_CENTS: i64 = 500;
/// Cents a TransactSavings adds to savings (FORD: 20.20).
pub const SAVINGS_CENTS: i64 = 2020;
/// Cents a WriteCheck takes from checking (FORD: 5.0); one cent more as a
/// penalty when savings and checking together hold less.
pub const CHECK_CENTS: i64 = 500;
/// Fewest accounts: Amalgamate and SendPayment name two distinct ones.
pub const ACCOUNTS_MIN: u64 = 2;

/// Salt of the SmallBank streams, so that they differ from YCSB's under one seed.
const STREAM_SALT: u64 = 0x534d_414c_4c42_414e;

/// The six transaction types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum SmallBankKind {
    /// Moves all of a's savings and checking into b's checking.
    Amalgamate,
    /// Reads a's savings and checking (read-only).
    Balance,
    /// Adds [`DEPOSIT_CENTS`] to a's checking.
    DepositChecking,
    /// Moves [`PAYMENT_CENTS`] from a's checking to b's, if a has them.
    SendPayment,
    /// Adds [`SAVINGS_CENTS`] to a's savings.
    TransactSavings,
    /// Takes [`CHECK_CENTS`] from a's checking (one more if a's savings and
    /// checking together hold less).
    WriteCheck,
}

impl SmallBankKind {
    /// Every type, in the order of [`SmallBankKind::index`].
    pub const ALL: [SmallBankKind; 6] = [
        SmallBankKind::Amalgamate,
        SmallBankKind::Balance,
        SmallBankKind::DepositChecking,
        SmallBankKind::SendPayment,
        SmallBankKind::TransactSavings,
        SmallBankKind::WriteCheck,
    ];

    /// Percent of transactions of this type (FORD's and Motor's mix).
    pub fn percent(self) -> u32 {
        match self {
            SmallBankKind::SendPayment => 25,
            _ => 15,
        }
    }

    /// The position in [`SmallBankKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            SmallBankKind::Amalgamate => "Amalgamate",
            SmallBankKind::Balance => "Balance",
            SmallBankKind::DepositChecking => "DepositChecking",
            SmallBankKind::SendPayment => "SendPayment",
            SmallBankKind::TransactSavings => "TransactSavings",
            SmallBankKind::WriteCheck => "WriteCheck",
        }
    }

    /// Whether it never writes.
    pub fn read_only(self) -> bool {
        self == SmallBankKind::Balance
    }
}

/// One SmallBank transaction and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmallBankTxn {
    /// See [`SmallBankKind::Amalgamate`]; `from != to`.
    Amalgamate {
        /// Emptied.
        from: u64,
        /// Receives into checking.
        to: u64,
    },
    /// See [`SmallBankKind::Balance`].
    Balance {
        /// The account.
        account: u64,
    },
    /// See [`SmallBankKind::DepositChecking`].
    DepositChecking {
        /// The account.
        account: u64,
        /// Cents added.
        amount: i64,
    },
    /// See [`SmallBankKind::SendPayment`]; `from != to`.
    SendPayment {
        /// Paying checking account.
        from: u64,
        /// Receiving checking account.
        to: u64,
        /// Cents moved.
        amount: i64,
    },
    /// See [`SmallBankKind::TransactSavings`].
    TransactSavings {
        /// The account.
        account: u64,
        /// Cents added.
        amount: i64,
    },
    /// See [`SmallBankKind::WriteCheck`].
    WriteCheck {
        /// The account.
        account: u64,
        /// Cents taken (one more as a penalty when short).
        amount: i64,
    },
}

impl SmallBankTxn {
    /// Its type.
    pub fn kind(&self) -> SmallBankKind {
        match self {
            SmallBankTxn::Amalgamate { .. } => SmallBankKind::Amalgamate,
            SmallBankTxn::Balance { .. } => SmallBankKind::Balance,
            SmallBankTxn::DepositChecking { .. } => SmallBankKind::DepositChecking,
            SmallBankTxn::SendPayment { .. } => SmallBankKind::SendPayment,
            SmallBankTxn::TransactSavings { .. } => SmallBankKind::TransactSavings,
            SmallBankTxn::WriteCheck { .. } => SmallBankKind::WriteCheck,
        }
    }
}

/// The hot set's size for `accounts` accounts: [`HOT_SHARE_PERCENT`] % of
/// them, at least [`ACCOUNTS_MIN`] (two hot accounts can be distinct) and
/// at most all of them.
pub fn hot_accounts(accounts: u64) -> u64 {
    (accounts * HOT_SHARE_PERCENT / 100).clamp(ACCOUNTS_MIN, accounts.max(ACCOUNTS_MIN))
}

/// What a SmallBank run is, deterministically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SmallBankSpec {
    /// Customers, each with a savings and a checking account (at least
    /// [`ACCOUNTS_MIN`]).
    pub accounts: u64,
    /// Seed of every stream.
    pub seed: u64,
}

impl SmallBankSpec {
    /// The generator of stream `stream` (one per client).
    pub fn generator(&self, stream: u64) -> SmallBankGen {
        let accounts = self.accounts.max(ACCOUNTS_MIN);
        SmallBankGen {
            accounts,
            hot: hot_accounts(accounts),
            rng: SmallRng::seed_from_u64(splitmix64(
                self.seed ^ STREAM_SALT ^ splitmix64(stream.wrapping_add(1)),
            )),
        }
    }
}

/// An endless, seeded stream of SmallBank transactions.
#[derive(Clone, Debug)]
pub struct SmallBankGen {
    accounts: u64,
    hot: u64,
    rng: SmallRng,
}

impl SmallBankGen {
    /// One account by the hot rule.
    fn account(&mut self) -> u64 {
        if self.rng.gen_range(0..100) < HOT_PERCENT {
            self.rng.gen_range(0..self.hot)
        } else {
            self.rng.gen_range(0..self.accounts)
        }
    }

    /// Two distinct accounts, each by the hot rule (the second drawn again
    /// while it equals the first; with at least two accounts in the hot set
    /// that ends).
    fn two_accounts(&mut self) -> (u64, u64) {
        let a = self.account();
        loop {
            let b = self.account();
            if b != a {
                return (a, b);
            }
        }
    }

    /// The next transaction.
    pub fn next_txn(&mut self) -> SmallBankTxn {
        let mut roll = self.rng.gen_range(0..100u32);
        let mut kind = SmallBankKind::WriteCheck;
        for k in SmallBankKind::ALL {
            if roll < k.percent() {
                kind = k;
                break;
            }
            roll -= k.percent();
        }
        match kind {
            SmallBankKind::Amalgamate => {
                let (from, to) = self.two_accounts();
                SmallBankTxn::Amalgamate { from, to }
            }
            SmallBankKind::Balance => SmallBankTxn::Balance {
                account: self.account(),
            },
            SmallBankKind::DepositChecking => SmallBankTxn::DepositChecking {
                account: self.account(),
                amount: DEPOSIT_CENTS,
            },
            SmallBankKind::SendPayment => {
                let (from, to) = self.two_accounts();
                SmallBankTxn::SendPayment {
                    from,
                    to,
                    amount: PAYMENT_CENTS,
                }
            }
            SmallBankKind::TransactSavings => SmallBankTxn::TransactSavings {
                account: self.account(),
                amount: SAVINGS_CENTS,
            },
            SmallBankKind::WriteCheck => SmallBankTxn::WriteCheck {
                account: self.account(),
                amount: CHECK_CENTS,
            },
        }
    }
}

impl Iterator for SmallBankGen {
    type Item = SmallBankTxn;
    fn next(&mut self) -> Option<SmallBankTxn> {
        Some(self.next_txn())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAWS: usize = 200_000;

    #[test]
    fn the_mix_is_15_15_15_25_15_15() {
        let mut counts = [0usize; 6];
        let spec = SmallBankSpec {
            accounts: 100_000,
            seed: 3,
        };
        for t in spec.generator(0).take(DRAWS) {
            counts[t.kind().index()] += 1;
        }
        for k in SmallBankKind::ALL {
            let share = counts[k.index()] as f64 / DRAWS as f64 * 100.0;
            assert!(
                (share - f64::from(k.percent())).abs() < 0.5,
                "{}: {share:.2} %, want {} %",
                k.name(),
                k.percent()
            );
        }
        assert_eq!(SmallBankKind::ALL.iter().map(|k| k.percent()).sum::<u32>(), 100);
    }

    #[test]
    fn ninety_percent_of_choices_go_to_the_hot_four_percent() {
        let spec = SmallBankSpec {
            accounts: 100_000,
            seed: 9,
        };
        let hot = hot_accounts(spec.accounts);
        assert_eq!(hot, 4_000);
        let (mut all, mut in_hot) = (0usize, 0usize);
        for t in spec.generator(1).take(DRAWS) {
            let accounts: &[u64] = match &t {
                SmallBankTxn::Amalgamate { from, to } | SmallBankTxn::SendPayment { from, to, .. } => {
                    assert_ne!(from, to, "two distinct accounts");
                    &[*from, *to]
                }
                SmallBankTxn::Balance { account }
                | SmallBankTxn::DepositChecking { account, .. }
                | SmallBankTxn::TransactSavings { account, .. }
                | SmallBankTxn::WriteCheck { account, .. } => &[*account],
            };
            for &a in accounts {
                assert!(a < spec.accounts);
                all += 1;
                in_hot += usize::from(a < hot);
            }
        }
        // 90 % drawn from the hot set, plus the 4 % of the uniform 10 %
        // that land there anyway.
        let share = in_hot as f64 / all as f64 * 100.0;
        assert!((share - 90.4).abs() < 0.5, "{share:.2} % of choices were hot");
    }

    #[test]
    fn streams_are_deterministic_per_seed_and_differ_between_streams() {
        let spec = SmallBankSpec {
            accounts: 50,
            seed: 5,
        };
        let a: Vec<_> = spec.generator(0).take(1000).collect();
        let b: Vec<_> = spec.generator(0).take(1000).collect();
        let c: Vec<_> = spec.generator(1).take(1000).collect();
        let d: Vec<_> = SmallBankSpec { seed: 6, ..spec }
            .generator(0)
            .take(1000)
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn two_accounts_are_enough() {
        assert_eq!(hot_accounts(2), 2);
        assert_eq!(hot_accounts(10), 2);
        let spec = SmallBankSpec { accounts: 2, seed: 1 };
        for t in spec.generator(0).take(1000) {
            if let SmallBankTxn::SendPayment { from, to, .. } = t {
                assert_ne!(from, to);
                assert!(from < 2 && to < 2);
            }
        }
    }
}
