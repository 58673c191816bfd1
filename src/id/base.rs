//! Positional numeral codecs over the standard's digit alphabets: the
//! ConvertToDecimal and ConvertFromDecimal routines of Chapter 7 (Tables
//! 7.4–7.6) and PILIN's base 31. Numbers are `num-bigint` integers, so
//! IPv6 addresses convert exactly.

use num_bigint::BigUint;

/// A digit alphabet: the `i`-th byte is the digit for value `i`.
#[derive(Debug, Clone, Copy)]
pub struct Alphabet {
    digits: &'static [u8],
    /// Each byte's value as a digit, `NOT_A_DIGIT` for bytes outside the
    /// alphabet (both letter cases when case-insensitive): one lookup per
    /// character instead of a search of the alphabet.
    values: [u8; 256],
}

const NOT_A_DIGIT: u8 = u8::MAX;

/// Table 7.6: base 27, `0 O 1 I V Y Z W X` excluded (`W` and `X` are separators).
pub const IBIP: Alphabet = Alphabet::new(b"23456789ABCDEFGHJKLMNPQRSTU", true);
/// Table 7.4: an IPv4 text read as a base-11 numeral.
pub const IPV4_TEXT: Alphabet = Alphabet::new(b"0123456789.", false);
/// Table 7.5: an IPv6 text read as a base-17 numeral.
pub const IPV6_TEXT: Alphabet = Alphabet::new(b"0123456789abcdef:", false);
/// PILIN: the ten digits then the 21 consonants.
pub const PILIN: Alphabet = Alphabet::new(b"0123456789BCDFGHJKLMNPQRSTVWXYZ", true);

impl Alphabet {
    pub const fn new(digits: &'static [u8], case_insensitive: bool) -> Self {
        let mut values = [NOT_A_DIGIT; 256];
        let mut i = 0;
        while i < digits.len() {
            values[digits[i] as usize] = i as u8;
            if case_insensitive {
                values[digits[i].to_ascii_lowercase() as usize] = i as u8;
                values[digits[i].to_ascii_uppercase() as usize] = i as u8;
            }
            i += 1;
        }
        Alphabet { digits, values }
    }

    pub fn radix(&self) -> u32 {
        self.digits.len() as u32
    }

    /// The value of one digit character, if it belongs to the alphabet.
    pub fn value_of(&self, c: char) -> Option<u32> {
        let value = *self.values.get(c as usize)?;
        (value != NOT_A_DIGIT).then_some(u32::from(value))
    }

    /// Whether the byte `b` is a digit of the alphabet (in a constant too).
    pub const fn is_digit_byte(&self, b: u8) -> bool {
        self.values[b as usize] != NOT_A_DIGIT
    }

    /// The digit character for a value below the radix.
    pub fn digit(&self, value: u32) -> char {
        self.digits[value as usize] as char
    }

    /// ConvertFromDecimal: the numeral of `n`, most significant digit first; `0` is one zero digit.
    pub fn encode(&self, n: &BigUint) -> String {
        if let Some(small) = to_u128(n) {
            return self.encode_u128(small);
        }
        let digits = n.to_radix_be(self.radix());
        digits.into_iter().map(|d| self.digit(d as u32)).collect()
    }

    /// `encode` of a number that fits 128 bits, in machine words (no big integer;
    /// 64-bit division once the number fits 64 bits, which most do).
    pub fn encode_u128(&self, n: u128) -> String {
        self.numeral_u128(n, &mut [0u8; 128]).to_string()
    }

    /// `encode_u128` into `buffer` (no allocation): the numeral, a slice of it.
    pub fn numeral_u128<'a>(&self, mut n: u128, buffer: &'a mut [u8; 128]) -> &'a str {
        let radix = u128::from(self.radix());
        let mut at = buffer.len();
        while n > u128::from(u64::MAX) {
            at -= 1;
            buffer[at] = self.digits[(n % radix) as usize];
            n /= radix;
        }
        let (mut n, radix) = (n as u64, radix as u64);
        loop {
            at -= 1;
            buffer[at] = self.digits[(n % radix) as usize];
            n /= radix;
            if n == 0 {
                break;
            }
        }
        std::str::from_utf8(&buffer[at..]).expect("the digits are ASCII")
    }

    /// ConvertToDecimal. On a character outside the alphabet, returns its 0-based char index.
    pub fn decode(&self, text: &str) -> Result<BigUint, usize> {
        if let Some(small) = self.decode_u128(text)? {
            return Ok(BigUint::from(small));
        }
        let mut values = Vec::with_capacity(text.len());
        for (i, c) in text.chars().enumerate() {
            values.push(self.value_of(c).ok_or(i)? as u8);
        }
        Ok(BigUint::from_radix_be(&values, self.radix()).unwrap_or_default())
    }

    /// `decode` in machine words: `Ok(None)` when the number needs more than 128 bits.
    pub fn decode_u128(&self, text: &str) -> Result<Option<u128>, usize> {
        // Byte by byte (every digit is ASCII, so the first byte that is no
        // digit starts a character, named by its character index): decoding
        // chars was most of an IBIp's parse.
        let digit = |at: usize, byte: u8| match self.values[usize::from(byte)] {
            NOT_A_DIGIT => Err(text[..at].chars().count()),
            value => Ok(value),
        };
        // Up to 12 digits of a radix up to 40 fit 64 bits, without a check
        // per digit: every numeral of an IBIp's date or port.
        if text.len() <= 12 && self.radix() <= 40 {
            let (radix, mut n) = (u64::from(self.radix()), 0u64);
            for (at, byte) in text.bytes().enumerate() {
                n = n * radix + u64::from(digit(at, byte)?);
            }
            return Ok(Some(n.into()));
        }
        let radix = u128::from(self.radix());
        let mut n = Some(0u128);
        for (at, byte) in text.bytes().enumerate() {
            let value = u128::from(digit(at, byte)?);
            n = n.and_then(|n| n.checked_mul(radix)?.checked_add(value));
        }
        Ok(n)
    }
}

/// `n` as a `u128`, or `None` when it does not fit.
pub fn to_u128(n: &BigUint) -> Option<u128> {
    u128::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Table 7.3 of the standard (ConvertFromDecimal with decim-to-IBIp).
    #[test]
    fn table_7_3_convert_from_decimal() {
        let big = |s: &str| s.parse::<BigUint>().unwrap();
        let rows = [
            ("1", "3"),
            ("19050", "U5H"),
            ("480992662", "38G3TS3"),
            ("4588904456580", "J8LNKAN8P"),
            ("478239719325051908572237", "7URMDHLL9SSN2D89M"),
        ];
        for (decimal, numeral) in rows {
            assert_eq!(IBIP.encode(&big(decimal)), numeral, "encode {decimal}");
            assert_eq!(IBIP.decode(numeral).unwrap(), big(decimal), "decode {numeral}");
            assert_eq!(IBIP.decode(&numeral.to_lowercase()).unwrap(), big(decimal));
        }
    }

    /// Table 7.2 (ConvertToDecimal with decim-to-IPv4 and decim-to-IPv6).
    #[test]
    fn table_7_2_convert_to_decimal() {
        assert_eq!(IPV4_TEXT.decode("150.163.2.174").unwrap().to_string(), "4588904456580");
        assert_eq!(IPV6_TEXT.decode("2001:252:0:1::2008:6").unwrap().to_string(), "478239719325051908572237");
    }

    /// The lookup table answers as a search of the digits would, for every
    /// character: both letter cases where the alphabet ignores case, nothing
    /// outside ASCII.
    #[test]
    fn digit_table_agrees_with_the_alphabet_for_every_character() {
        for (alphabet, digits, any_case) in [
            (IBIP, "23456789ABCDEFGHJKLMNPQRSTU", true),
            (IPV4_TEXT, "0123456789.", false),
            (IPV6_TEXT, "0123456789abcdef:", false),
            (PILIN, "0123456789BCDFGHJKLMNPQRSTVWXYZ", true),
        ] {
            for c in (0..0x3000).filter_map(char::from_u32) {
                let wanted = match any_case {
                    true => digits.find(c.to_ascii_uppercase()),
                    false => digits.find(c),
                };
                let wanted = wanted.filter(|_| c.is_ascii()).map(|i| i as u32);
                assert_eq!(alphabet.value_of(c), wanted, "{c:?} in {digits}");
            }
        }
    }

    #[test]
    fn alphabet_excludes_ambiguous_letters() {
        for c in ['0', 'O', '1', 'I', 'V', 'Y', 'Z', 'W', 'X'] {
            assert_eq!(IBIP.value_of(c), None, "{c}");
        }
        assert_eq!(IBIP.radix(), 27);
        assert_eq!(PILIN.radix(), 31);
        assert_eq!(IBIP.decode("3O"), Err(1));
    }

    /// A numeral is decoded byte by byte, but a bad digit is still named by its
    /// character index, after multi-byte characters too.
    #[test]
    fn a_bad_digit_is_named_by_its_character_index() {
        assert_eq!(IBIP.decode_u128("34é"), Err(2));
        assert_eq!(IBIP.decode_u128("ÿ"), Err(0));
        assert_eq!(IPV4_TEXT.decode("1.2é3"), Err(3));
        assert_eq!(IBIP.decode_u128("34ab"), Ok(Some(((27 + 2) * 27 + 8) * 27 + 9)));
    }

    proptest! {
        /// The machine-word paths agree with the big-integer ones on every
        /// number near and beyond 128 bits.
        #[test]
        fn machine_words_agree_with_big_integers(text in "[0-9a-f:]{1,40}") {
            let big = BigUint::from_radix_be(
                &text.chars().map(|c| IPV6_TEXT.value_of(c).unwrap() as u8).collect::<Vec<_>>(), 17).unwrap();
            prop_assert_eq!(IPV6_TEXT.decode(&text).unwrap(), big.clone());
            let numeral: String = big.to_radix_be(27).into_iter().map(|d| IBIP.digit(d as u32)).collect();
            prop_assert_eq!(IBIP.encode(&big), numeral);
        }

        #[test]
        fn numerals_round_trip(n in any::<u128>()) {
            for alphabet in [IBIP, IPV4_TEXT, IPV6_TEXT, PILIN] {
                let text = alphabet.encode_u128(n);
                prop_assert_eq!(to_u128(&alphabet.decode(&text).unwrap()), Some(n));
            }
        }
    }
}
