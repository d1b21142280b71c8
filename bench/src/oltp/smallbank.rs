//! SmallBank on records: a savings and a checking table, one 16-byte
//! record per account in each (`[account: u64][balance: i64 cents]`, little
//! endian), row = account number. The transaction streams and their mix are
//! `workload::smallbank`'s.
//!
//! The conserved quantity is the sum of every balance: it starts at
//! `2 × accounts ×` [`INITIAL_CENTS`] and moves only by the deposits,
//! savings transactions and checks that committed (amalgamations and
//! payments move money between accounts).

use fabric::le_word;
use txn::TxError;
use workload::smallbank::{SmallBankGen, SmallBankKind, SmallBankSpec, SmallBankTxn};

use super::engine::OltpTx;
use super::{i64_at, row, OltpWorkload, Outcome, Tables};

/// The savings table's number.
pub const SAVINGS: usize = 0;
/// The checking table's number.
pub const CHECKING: usize = 1;
/// Bytes of an account record.
pub const RECORD_BYTES: usize = 16;
/// Where the account number is in a record.
const ACCOUNT_AT: usize = 0;
/// Where the balance is in a record.
const BALANCE_AT: usize = 8;
/// Each account's balance in each table after loading: 10,000.00, so that
/// payments and checks rarely find an account short in a short run.
pub const INITIAL_CENTS: i64 = 1_000_000;

/// SmallBank over `accounts` accounts.
#[derive(Clone, Copy, Debug)]
pub struct SmallBank {
    /// The accounts and the seed of the streams.
    pub spec: SmallBankSpec,
}

fn image(account: u64, cents: i64) -> Vec<u8> {
    let mut v = vec![0u8; RECORD_BYTES];
    v[ACCOUNT_AT..ACCOUNT_AT + 8].copy_from_slice(&account.to_le_bytes());
    v[BALANCE_AT..BALANCE_AT + 8].copy_from_slice(&cents.to_le_bytes());
    v
}

/// An account's balance, the record read for update when `update`.
async fn balance<T: OltpTx>(tx: &mut T, rec: T::Rec, update: bool) -> Result<i64, TxError> {
    let bytes = if update {
        tx.read_for_update(rec).await?
    } else {
        tx.read(rec).await?
    };
    Ok(i64_at(bytes, BALANCE_AT))
}

async fn set_balance<T: OltpTx>(tx: &mut T, rec: T::Rec, cents: i64) -> Result<(), TxError> {
    tx.write_part(rec, BALANCE_AT, &cents.to_le_bytes()).await
}

impl OltpWorkload for SmallBank {
    type Txn = SmallBankTxn;
    type Gen = SmallBankGen;

    const NAME: &'static str = "smallbank";
    const KINDS: &'static [&'static str] = &[
        "Amalgamate",
        "Balance",
        "DepositChecking",
        "SendPayment",
        "TransactSavings",
        "WriteCheck",
    ];
    const TABLES: &'static [&'static str] = &["savings", "checking"];
    const MEASURE: &'static str = "the sum of all balances (cents)";

    fn units(&self) -> u64 {
        self.spec.accounts
    }

    fn records_per_unit(&self) -> u64 {
        2
    }

    fn record_bytes_max(&self) -> u32 {
        RECORD_BYTES as u32
    }

    fn images(&self, unit: u64, out: &mut Vec<(usize, Vec<u8>)>) {
        out.push((SAVINGS, image(unit, INITIAL_CENTS)));
        out.push((CHECKING, image(unit, INITIAL_CENTS)));
    }

    fn generator(&self, stream: u64) -> SmallBankGen {
        self.spec.generator(stream)
    }

    fn kind(txn: &SmallBankTxn) -> usize {
        txn.kind().index()
    }

    fn read_only(kind: usize) -> bool {
        SmallBankKind::ALL.get(kind).is_some_and(|k| k.read_only())
    }

    async fn execute<T: OltpTx>(
        &self,
        tx: &mut T,
        t: &Tables<T::Rec>,
        txn: SmallBankTxn,
    ) -> Result<Outcome, TxError> {
        let done = |effect| {
            Ok(Outcome {
                declined: false,
                effect,
            })
        };
        match txn {
            SmallBankTxn::Amalgamate { from, to } => {
                let (sav, chk, dst) = (
                    row(t, SAVINGS, from)?,
                    row(t, CHECKING, from)?,
                    row(t, CHECKING, to)?,
                );
                let s = balance(tx, sav, true).await?;
                let c = balance(tx, chk, true).await?;
                let d = balance(tx, dst, true).await?;
                set_balance(tx, sav, 0).await?;
                set_balance(tx, chk, 0).await?;
                set_balance(tx, dst, d.wrapping_add(s).wrapping_add(c)).await?;
                done(0)
            }
            SmallBankTxn::Balance { account } => {
                balance(tx, row(t, SAVINGS, account)?, false).await?;
                balance(tx, row(t, CHECKING, account)?, false).await?;
                done(0)
            }
            SmallBankTxn::DepositChecking { account, amount } => {
                let chk = row(t, CHECKING, account)?;
                let c = balance(tx, chk, true).await?;
                set_balance(tx, chk, c.wrapping_add(amount)).await?;
                done(amount)
            }
            SmallBankTxn::SendPayment { from, to, amount } => {
                let (src, dst) = (row(t, CHECKING, from)?, row(t, CHECKING, to)?);
                let s = balance(tx, src, true).await?;
                if s < amount {
                    return Ok(Outcome {
                        declined: true,
                        effect: 0,
                    });
                }
                let d = balance(tx, dst, true).await?;
                set_balance(tx, src, s - amount).await?;
                set_balance(tx, dst, d.wrapping_add(amount)).await?;
                done(0)
            }
            SmallBankTxn::TransactSavings { account, amount } => {
                let sav = row(t, SAVINGS, account)?;
                let s = balance(tx, sav, true).await?;
                set_balance(tx, sav, s.wrapping_add(amount)).await?;
                done(amount)
            }
            SmallBankTxn::WriteCheck { account, amount } => {
                let chk = row(t, CHECKING, account)?;
                let s = balance(tx, row(t, SAVINGS, account)?, false).await?;
                let c = balance(tx, chk, true).await?;
                // TPC's overdraft rule: a check the account cannot cover
                // costs a one-cent penalty.
                let debit = if s.saturating_add(c) < amount {
                    amount + 1
                } else {
                    amount
                };
                set_balance(tx, chk, c.wrapping_sub(debit)).await?;
                done(-debit)
            }
        }
    }

    fn measure(&self, _table: usize, bytes: &[u8]) -> i64 {
        i64_at(bytes, BALANCE_AT)
    }

    fn inconsistency(&self, table: usize, row: u64, bytes: &[u8]) -> Option<String> {
        if bytes.len() != RECORD_BYTES {
            return Some(format!("{} bytes, not {RECORD_BYTES}", bytes.len()));
        }
        let account = le_word(bytes, ACCOUNT_AT);
        (account != row).then(|| {
            format!(
                "{} row {row} names account {account}",
                Self::TABLES.get(table).copied().unwrap_or("?")
            )
        })
    }
}
