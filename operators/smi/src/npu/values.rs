//! npu-smi's words for what a device reports: its names (the `Name` column, `Chip Type`,
//! `Chip Name`), where it sits (`Bus-Id`, `PCIe Bus Info`) and what its sensors read
//! (temperature, power, voltage), each as the real npu-smi prints it (its `printf` formats:
//! `%d` degrees, `%.1f` watts, `%.2f` volts), or `NA` where the device does not say.
#![forbid(unsafe_code)]

use crate::extras::Extras;

use super::NA;

/// The `Bus-Id` and `PCIe Bus Info` of a device on no bus (the mock device, the kernel
/// module's software devices): npu-smi formats a chip's bus address from the numbers the
/// driver gives it (`%04X:%02X:%02X.%X`), so a chip without a PCIe address prints zeros. It
/// is a bus address in shape, so a parser that splits the table on `|` and blanks keeps its
/// column count, and no word a health regex could take for a state (`NA`, `OK`).
pub(crate) const NO_BUS: &str = "0000:00:00.0";

/// `s` with every character outside `[A-Za-z0-9_]` replaced by `_`: one word, as npu-smi's
/// `Name` column and `Chip Name` always are, so parsers that split on blanks (gpustack) or
/// match `\w+` keep their columns. `None` for an empty name.
pub(crate) fn word(s: &str) -> Option<String> {
    let w: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Some(w).filter(|w| !w.is_empty())
}

/// The chip's name (`Chip Name`, and the `Name` column of `info`): GET_IDENTITY's
/// `chip_name` (e.g. `910B3`); from a driver that does not report one, the model.
pub(crate) fn chip_name(e: &Extras) -> Option<String> {
    e.chip_name
        .as_deref()
        .filter(|c| !c.is_empty())
        .or(e.name.as_deref())
        .and_then(word)
}

/// `Chip Type`: what the model says before the chip's name. npu-smi prints `Ascend` for
/// chip `910B3` of model `Ascend910B3`, so: the model with the chip name cut off its end
/// when the model ends with it (`Ascend910B3` and `910B3` give `Ascend`); otherwise the
/// model's leading letters (`davinci_mock` gives `davinci`); `None` when neither gives a
/// word.
pub(crate) fn chip_type(e: &Extras) -> Option<String> {
    let model = e.name.as_deref()?;
    if let Some(chip) = e.chip_name.as_deref().filter(|c| !c.is_empty()) {
        if let Some(prefix) = model.strip_suffix(chip) {
            let prefix = prefix.trim_end_matches(['_', '-', ' ']);
            if let Some(w) = word(prefix) {
                return Some(w);
            }
        }
    }
    let letters: String = model
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    word(&letters)
}

/// `info -m`'s `Chip Name`: type and name with a blank (`Ascend 910B3`), as npu-smi prints
/// it; the name alone when there is no type; `NA` when there is neither.
pub(crate) fn map_name(e: &Extras) -> String {
    match (chip_type(e), chip_name(e)) {
        (Some(t), Some(n)) => format!("{t} {n}"),
        (_, Some(n)) => n,
        _ => NA.into(),
    }
}

/// The device's bus address as npu-smi prints it (`0000:C1:00.0`: hex digits upper case),
/// or [`NO_BUS`] for a device on no bus.
pub(crate) fn bus_id(e: &Extras) -> String {
    match e.bus_id.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => crate::output::printable(&b.to_ascii_uppercase()),
        None => NO_BUS.into(),
    }
}

/// The die temperature in whole degrees Celsius (npu-smi's `%d`), `NA` without sensors.
pub(crate) fn temperature(e: &Extras) -> String {
    e.sensors
        .map_or_else(|| NA.into(), |s| s.temperature_c().to_string())
}

/// The memory (HBM) temperature in whole degrees Celsius, `NA` without sensors.
pub(crate) fn memory_temperature(e: &Extras) -> String {
    e.sensors
        .map_or_else(|| NA.into(), |s| s.memory_temperature_c().to_string())
}

/// The power drawn in watts with one decimal (npu-smi's `%.1f`: `103.5`), `NA` without
/// sensors.
pub(crate) fn power(e: &Extras) -> String {
    e.sensors
        .map_or_else(|| NA.into(), |s| fixed(u64::from(s.power_mw), 1))
}

/// The core voltage in volts with two decimals (npu-smi's `Voltage(V)`, `%.2f`), `NA`
/// without sensors.
pub(crate) fn voltage(e: &Extras) -> String {
    e.sensors
        .map_or_else(|| NA.into(), |s| fixed(u64::from(s.voltage_mv), 2))
}

/// `milli / 1000` with `decimals` (1 or 2) decimals, rounded half up.
fn fixed(milli: u64, decimals: u32) -> String {
    let unit = 10u64.pow(3 - decimals);
    let v = (milli + unit / 2) / unit;
    let scale = 10u64.pow(decimals);
    format!("{}.{:0w$}", v / scale, v % scale, w = decimals as usize)
}

/// `VDie ID`: the die's unique id, five 32-bit words (`" %08X"` each). A davinci device's
/// unique id is its UUID: its 16 bytes are the first four words, the fifth is 0. `NA`
/// without a UUID.
pub(crate) fn vdie_id(e: &Extras) -> String {
    let Some(hex) = e.uuid.as_deref().map(|u| u.replace('-', "")) else {
        return NA.into();
    };
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return NA.into();
    }
    let mut words: Vec<String> = (0..4)
        .map(|i| hex[i * 8..i * 8 + 8].to_ascii_uppercase())
        .collect();
    words.push("00000000".into());
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(model: Option<&str>, chip: Option<&str>) -> Extras {
        let mut e = Extras::default();
        e.name = model.map(str::to_string);
        e.chip_name = chip.map(str::to_string);
        e
    }

    #[test]
    fn chip_type_is_the_model_before_the_chip_name() {
        let e = ex(Some("Ascend910B3"), Some("910B3"));
        assert_eq!(
            (chip_type(&e), chip_name(&e)),
            (Some("Ascend".into()), Some("910B3".into()))
        );
        assert_eq!(map_name(&e), "Ascend 910B3");
        // The mock's default identity.
        let e = ex(Some("davinci_mock"), Some("mock0"));
        assert_eq!(chip_type(&e).as_deref(), Some("davinci"));
        assert_eq!(map_name(&e), "davinci mock0");
        // A separator between them is not part of the type.
        assert_eq!(
            chip_type(&ex(Some("Ascend-910B1"), Some("910B1"))).as_deref(),
            Some("Ascend")
        );
        // No chip name: the model names the chip; no model: nothing to say.
        let e = ex(Some("Ascend910B3"), None);
        assert_eq!(
            (chip_type(&e).as_deref(), chip_name(&e).as_deref()),
            (Some("Ascend"), Some("Ascend910B3"))
        );
        let e = ex(None, None);
        assert_eq!(
            (chip_type(&e), chip_name(&e), map_name(&e)),
            (None, None, NA.into())
        );
        assert_eq!(chip_type(&ex(Some("910B"), Some("910B"))), None);
    }

    #[test]
    fn names_are_one_word() {
        let e = ex(Some("my model 2"), Some("x y-z\u{202e}"));
        assert_eq!(chip_name(&e).as_deref(), Some("x_y_z_"));
        assert_eq!(word(""), None);
        assert_eq!(word("a b").as_deref(), Some("a_b"));
    }

    #[test]
    fn sensor_values_in_npu_smis_formats() {
        assert_eq!(fixed(103_450, 1), "103.5");
        assert_eq!(fixed(103_449, 1), "103.4");
        assert_eq!(fixed(0, 1), "0.0");
        assert_eq!(fixed(850, 2), "0.85");
        assert_eq!(fixed(1_005, 2), "1.01");
        let e = Extras::default();
        for f in [temperature, memory_temperature, power, voltage] {
            assert_eq!(f(&e), NA);
        }
        assert_eq!(bus_id(&e), NO_BUS);
        let mut e = Extras::default();
        e.bus_id = Some("0000:c1:00.0".into());
        e.uuid = Some("0123abcd-4567-89ab-cdef-0123456789ab".into());
        assert_eq!(bus_id(&e), "0000:C1:00.0");
        assert_eq!(vdie_id(&e), "0123ABCD 456789AB CDEF0123 456789AB 00000000");
        assert_eq!(vdie_id(&Extras::default()), NA);
    }
}
