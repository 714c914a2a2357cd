//! Compiled loops of streameval's evaluation core.
//!
//! Each function here has a numpy reference in `streameval.core` (`roc_auc`, `page_hinkley`,
//! `forgetting`) that the tests compare it with bit for bit: the floating-point operations
//! are the same and in the same order (every sum runs sequentially in array order, as
//! `np.bincount` and `np.cumsum` do). The Python side uses these when this module is
//! installed and the reference when not (`streameval.core.kernels`).

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn slice<'a, T: numpy::Element>(
    array: &'a PyReadonlyArray1<'_, T>,
    name: &str,
) -> PyResult<&'a [T]> {
    array
        .as_slice()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a contiguous array")))
}

/// A key that sorts as numpy sorts floats: by value, −0 equal to 0, every NaN last.
fn sort_key(value: f64) -> u64 {
    if value.is_nan() {
        return u64::MAX;
    }
    let bits = (value + 0.0).to_bits(); // −0 + 0 = +0
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// One held order moved on: of the first `held` entries of `values` and `codes`, those whose
/// code is below `first_code` leave, and the new entries (given in any order) enter, sorted by
/// value, each after every entry of an equal value already there and after the new ones
/// before it (a stable sort, then a merge on the right side). The result goes to the first
/// entries of `out_values` and `out_codes`, buffers with room for `held` + the new entries;
/// returns how many it wrote. (The caller keeps two pairs of buffers and swaps them: a fresh
/// array per call cost more in page faults than the merge.)
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn ordered_advance<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, f64>,
    codes: PyReadonlyArray1<'py, i64>,
    held: usize,
    first_code: i64,
    new_values: PyReadonlyArray1<'py, f64>,
    new_codes: PyReadonlyArray1<'py, i64>,
    out_values: &Bound<'py, PyArray1<f64>>,
    out_codes: &Bound<'py, PyArray1<i64>>,
) -> PyResult<usize> {
    let aliased = |_| PyValueError::new_err("the output buffers must not be the input arrays");
    let mut out_values = out_values.try_readwrite().map_err(aliased)?;
    let mut out_codes = out_codes.try_readwrite().map_err(aliased)?;
    let (values, codes) = (slice(&values, "values")?, slice(&codes, "codes")?);
    let (new_values, new_codes) = (
        slice(&new_values, "new_values")?,
        slice(&new_codes, "new_codes")?,
    );
    let out_values = out_values
        .as_slice_mut()
        .map_err(|_| PyValueError::new_err("out_values must be a contiguous array"))?;
    let out_codes = out_codes
        .as_slice_mut()
        .map_err(|_| PyValueError::new_err("out_codes must be a contiguous array"))?;
    let m = new_values.len();
    if values.len() != codes.len() || new_codes.len() != m || out_values.len() != out_codes.len() {
        return Err(PyValueError::new_err(
            "values and codes must have the same length",
        ));
    }
    if held > values.len() || held + m > out_values.len() {
        return Err(PyValueError::new_err(
            "the buffers have no room for the new entries",
        ));
    }
    Ok(py.allow_threads(|| {
        // (key, position): distinct, so an unstable sort keeps equal values in their order
        let mut order: Vec<(u64, usize)> =
            new_values.iter().map(|&v| sort_key(v)).zip(0..m).collect();
        order.sort_unstable();
        let mut next = order.iter().peekable();
        let mut write = 0;
        for (&value, &code) in values[..held].iter().zip(&codes[..held]) {
            if code < first_code {
                continue;
            }
            let key = sort_key(value);
            while let Some(&&(new_key, j)) = next.peek() {
                if new_key >= key {
                    break;
                }
                out_values[write] = new_values[j];
                out_codes[write] = new_codes[j];
                write += 1;
                next.next();
            }
            out_values[write] = value;
            out_codes[write] = code;
            write += 1;
        }
        for &(_, j) in next {
            out_values[write] = new_values[j];
            out_codes[write] = new_codes[j];
            write += 1;
        }
        write
    }))
}

/// Outcomes counted into per-value tallies: `values` ascending and distinct, `positive` and
/// `negative` the outcomes counted at each; each new outcome adds one to its value's tally
/// (a value not there yet enters in order, as −0 enters as +0). Returns the new three arrays.
/// NaN is refused: no value equals it, so it has no tally to count into.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn counted_add<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, f64>,
    positive: PyReadonlyArray1<'py, i64>,
    negative: PyReadonlyArray1<'py, i64>,
    new_values: PyReadonlyArray1<'py, f64>,
    new_positive: PyReadonlyArray1<'py, bool>,
) -> PyResult<(
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
)> {
    let values = slice(&values, "values")?;
    let (positive, negative) = (slice(&positive, "positive")?, slice(&negative, "negative")?);
    let (new_values, new_positive) = (
        slice(&new_values, "new_values")?,
        slice(&new_positive, "new_positive")?,
    );
    if positive.len() != values.len()
        || negative.len() != values.len()
        || new_positive.len() != new_values.len()
    {
        return Err(PyValueError::new_err(
            "values and counts must have the same length",
        ));
    }
    if new_values.iter().any(|v| v.is_nan()) {
        return Err(PyValueError::new_err("a value to count is NaN"));
    }
    let (out_values, out_pos, out_neg) = py.allow_threads(|| {
        let mut order: Vec<(u64, bool)> = new_values
            .iter()
            .map(|&v| sort_key(v))
            .zip(new_positive.iter().copied())
            .collect();
        order.sort_unstable();
        let capacity = values.len() + order.len();
        let (mut out_values, mut out_pos, mut out_neg) = (
            Vec::with_capacity(capacity),
            Vec::with_capacity(capacity),
            Vec::with_capacity(capacity),
        );
        let mut next = order.iter().peekable();
        let mut take =
            |key: u64,
             value: f64,
             pos: i64,
             neg: i64,
             next: &mut std::iter::Peekable<std::slice::Iter<'_, (u64, bool)>>| {
                let (mut pos, mut neg) = (pos, neg);
                while let Some(&&(new_key, is_positive)) = next.peek() {
                    if new_key != key {
                        break;
                    }
                    if is_positive {
                        pos += 1;
                    } else {
                        neg += 1;
                    }
                    next.next();
                }
                out_values.push(value);
                out_pos.push(pos);
                out_neg.push(neg);
            };
        for i in 0..values.len() {
            let key = sort_key(values[i]);
            while let Some(&&(new_key, _)) = next.peek() {
                if new_key >= key {
                    break;
                }
                take(
                    new_key,
                    f64::from_bits(value_of_key(new_key)),
                    0,
                    0,
                    &mut next,
                );
            }
            take(key, values[i], positive[i], negative[i], &mut next);
        }
        while let Some(&&(new_key, _)) = next.peek() {
            take(
                new_key,
                f64::from_bits(value_of_key(new_key)),
                0,
                0,
                &mut next,
            );
        }
        (out_values, out_pos, out_neg)
    });
    Ok((
        out_values.into_pyarray(py),
        out_pos.into_pyarray(py),
        out_neg.into_pyarray(py),
    ))
}

/// The bits of the value a [`sort_key`] of a number came from (+0 for ±0).
fn value_of_key(key: u64) -> u64 {
    if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    }
}

/// The sums over runs of equal values, then the statistic: `U / (P · N)`, NaN when there is
/// no value or one side weighs nothing. The sums over runs start from the first run's terms,
/// as `np.cumsum` does (not from 0, which would turn a first −0 into +0).
struct Runs {
    total_pos: f64,
    cum_neg: f64,
    u: f64,
    pos: f64,
    neg: f64,
    /// the value of the run being summed (None before the first entry)
    current: Option<f64>,
    closed: usize,
}

impl Runs {
    fn new() -> Self {
        Runs {
            total_pos: 0.0,
            cum_neg: 0.0,
            u: 0.0,
            pos: 0.0,
            neg: 0.0,
            current: None,
            closed: 0,
        }
    }

    /// One entry, in order of value: a value unequal to the run's closes the run.
    fn add(&mut self, value: f64, pos: f64, neg: f64) {
        if matches!(self.current, Some(run) if value != run) {
            self.close();
        }
        self.current = Some(value);
        self.pos += pos;
        self.neg += neg;
    }

    fn close(&mut self) {
        if self.closed == 0 {
            self.total_pos = self.pos;
            self.cum_neg = self.neg;
        } else {
            self.total_pos += self.pos;
            self.cum_neg += self.neg;
        }
        let below = self.cum_neg - self.neg;
        let term = self.pos * (below + 0.5 * self.neg);
        self.u = if self.closed == 0 {
            term
        } else {
            self.u + term
        };
        self.closed += 1;
        self.pos = 0.0;
        self.neg = 0.0;
    }

    fn statistic(mut self) -> f64 {
        if self.current.is_none() {
            return f64::NAN;
        }
        self.close();
        let pairs = self.total_pos * self.cum_neg; // 0 also when the product underflows
        if pairs.is_nan() || pairs <= 0.0 {
            return f64::NAN;
        }
        self.u / pairs
    }
}

/// The Mann–Whitney AUC of weights per value, `values` ascending (equal values share a run):
/// `positive[i]` and `negative[i]` are what entry i weighs on each side.
#[pyfunction]
fn mann_whitney(
    py: Python<'_>,
    values: PyReadonlyArray1<'_, f64>,
    positive: PyReadonlyArray1<'_, f64>,
    negative: PyReadonlyArray1<'_, f64>,
) -> PyResult<f64> {
    let values = slice(&values, "values")?;
    let (positive, negative) = (slice(&positive, "positive")?, slice(&negative, "negative")?);
    if positive.len() != values.len() || negative.len() != values.len() {
        return Err(PyValueError::new_err(
            "values and weights must have the same length",
        ));
    }
    Ok(py.allow_threads(|| {
        let mut runs = Runs::new();
        for (i, &value) in values.iter().enumerate() {
            runs.add(value, positive[i], negative[i]);
        }
        runs.statistic()
    }))
}

/// The same statistic for a held order: entry i is positive when `codes[i] & 1`, and weighs
/// `decay[newest − (codes[i] >> 1)]` (a fading factor's power of its age), or 1 without
/// `decay`.
#[pyfunction]
#[pyo3(signature = (values, codes, decay=None, newest=0))]
fn held_mann_whitney(
    py: Python<'_>,
    values: PyReadonlyArray1<'_, f64>,
    codes: PyReadonlyArray1<'_, i64>,
    decay: Option<PyReadonlyArray1<'_, f64>>,
    newest: i64,
) -> PyResult<f64> {
    let (values, codes) = (slice(&values, "values")?, slice(&codes, "codes")?);
    if values.len() != codes.len() {
        return Err(PyValueError::new_err(
            "values and codes must have the same length",
        ));
    }
    let decay = match &decay {
        Some(array) => Some(slice(array, "decay")?),
        None => None,
    };
    let outcome = py.allow_threads(|| {
        let mut runs = Runs::new();
        for (&value, &code) in values.iter().zip(codes) {
            let weight = match decay {
                Some(table) => match usize::try_from(newest - (code >> 1))
                    .ok()
                    .and_then(|age| table.get(age))
                {
                    Some(&weight) => weight,
                    None => return None,
                },
                None => 1.0,
            };
            // the same bits as adding the weight to one side and nothing to the other, without
            // a branch that a random class would mispredict half the time
            let positive = weight * (code & 1) as f64;
            runs.add(value, positive, weight - positive);
        }
        Some(runs.statistic())
    });
    outcome.ok_or_else(|| {
        PyValueError::new_err("an entry is older than the decay table or newer than newest")
    })
}

/// The running state of a Page-Hinkley test (`streameval.core.page_hinkley.PageHinkley`): t,
/// Σx, m_t, M_t, t*, Σx through t*, and the mirrored test's m'_t and M'_t.
type TestState = (i64, f64, f64, f64, i64, f64, f64, f64);

const FRESH: TestState = (0, 0.0, 0.0, f64::INFINITY, 0, 0.0, 0.0, f64::NEG_INFINITY);

/// An alarm: position, PH_T, where the change began (None: not known), mean before, after.
type Change = (i64, f64, Option<i64>, Option<f64>, Option<f64>);

/// `PageHinkley._scan`: the test over `x`, value by value, with the reference's operations in
/// its order (the reference computes a chunk at a time with sequential accumulations; a reset
/// after an alarm or a fall starts again from the next value). Returns the alarms and the
/// state after the last value.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn page_hinkley_scan(
    py: Python<'_>,
    x: PyReadonlyArray1<'_, f64>,
    state: TestState,
    delta: f64,
    threshold: f64,
    min_instances: i64,
    restart_threshold: f64,
    standardize: bool,
    variance_floor: f64,
) -> PyResult<(Vec<Change>, TestState)> {
    let x = slice(&x, "x")?;
    Ok(py.allow_threads(|| {
        let (
            mut t,
            mut sum,
            mut cumulative,
            mut minimum,
            mut at,
            mut at_sum,
            mut rise,
            mut maximum,
        ) = state;
        let mut alarms = Vec::new();
        for (i, &value) in x.iter().enumerate() {
            t += 1;
            sum += value;
            let mean = sum / t as f64;
            let mut deviation = value - mean;
            if standardize {
                deviation /= (mean * (1.0 - mean)).max(variance_floor).sqrt();
            }
            cumulative += deviation - delta;
            minimum = minimum.min(cumulative);
            if cumulative == minimum {
                at = t;
                at_sum = sum;
            }
            let statistic = cumulative - minimum;
            let ready = t >= min_instances;
            if ready && statistic > threshold {
                let change = if at != 0 {
                    let after = (sum - at_sum) / (t - at) as f64;
                    (
                        Some(i as i64 - (t - at)),
                        Some(at_sum / at as f64),
                        Some(after),
                    )
                } else {
                    (None, None, None)
                };
                alarms.push((i as i64, statistic, change.0, change.1, change.2));
                (t, sum, cumulative, minimum, at, at_sum, rise, maximum) = FRESH;
                continue;
            }
            if restart_threshold != 0.0 {
                rise += deviation + delta;
                maximum = maximum.max(rise);
                if ready && maximum - rise > restart_threshold {
                    (t, sum, cumulative, minimum, at, at_sum, rise, maximum) = FRESH;
                }
            }
        }
        (
            alarms,
            (t, sum, cumulative, minimum, at, at_sum, rise, maximum),
        )
    }))
}

/// `BlockFading.running` of the rows (loss, 1), divided: the fading mean of the losses after
/// each, with the reference's operations in its order. `growth` is a^(−k) for k = 0..block,
/// `decay` a^block; returns the means and the sums' state after the last loss (n, base,
/// partial).
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn fading_mean_advance<'py>(
    py: Python<'py>,
    losses: PyReadonlyArray1<'py, f64>,
    growth: PyReadonlyArray1<'py, f64>,
    decay: f64,
    n: i64,
    base: (f64, f64),
    partial: (f64, f64),
) -> PyResult<(Bound<'py, PyArray1<f64>>, i64, (f64, f64), (f64, f64))> {
    let (losses, growth) = (slice(&losses, "losses")?, slice(&growth, "growth")?);
    if growth.len() < 2 || n < 0 {
        return Err(PyValueError::new_err(
            "growth needs a block of at least one outcome",
        ));
    }
    let block = (growth.len() - 1) as i64;
    let (means, state) = py.allow_threads(|| {
        let (mut n, (mut b0, mut b1), (mut p0, mut p1)) = (n, base, partial);
        let mut means = Vec::with_capacity(losses.len());
        for &loss in losses {
            let weight = growth[(n % block + 1) as usize];
            p0 += weight * loss;
            p1 += weight * 1.0;
            means.push((b0 + p0) / (b1 + p1));
            n += 1;
            if n % block == 0 {
                b0 = decay * (b0 + p0);
                b1 = decay * (b1 + p1);
                (p0, p1) = (0.0, 0.0);
            }
        }
        (means, (n, (b0, b1), (p0, p1)))
    });
    Ok((means.into_pyarray(py), state.0, state.1, state.2))
}

#[pymodule]
fn streameval_kernels(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ordered_advance, m)?)?;
    m.add_function(wrap_pyfunction!(counted_add, m)?)?;
    m.add_function(wrap_pyfunction!(mann_whitney, m)?)?;
    m.add_function(wrap_pyfunction!(held_mann_whitney, m)?)?;
    m.add_function(wrap_pyfunction!(page_hinkley_scan, m)?)?;
    m.add_function(wrap_pyfunction!(fading_mean_advance, m)?)?;
    Ok(())
}
