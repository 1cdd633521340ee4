//! GGUF metadata values (`gguf_metadata_value_type`) and their encoding.

/// A metadata value (`gguf_metadata_value_type`).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: one element type for all elements. Nested arrays are refused (llama.cpp writes none).
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

pub(super) const T_U8: u32 = 0;
pub(super) const T_I8: u32 = 1;
pub(super) const T_U16: u32 = 2;
pub(super) const T_I16: u32 = 3;
pub(super) const T_U32: u32 = 4;
pub(super) const T_I32: u32 = 5;
pub(super) const T_F32: u32 = 6;
pub(super) const T_BOOL: u32 = 7;
pub(super) const T_STRING: u32 = 8;
pub(super) const T_ARRAY: u32 = 9;
pub(super) const T_U64: u32 = 10;
pub(super) const T_I64: u32 = 11;
pub(super) const T_F64: u32 = 12;

impl Value {
    pub(super) fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => T_U8,
            Value::I8(_) => T_I8,
            Value::U16(_) => T_U16,
            Value::I16(_) => T_I16,
            Value::U32(_) => T_U32,
            Value::I32(_) => T_I32,
            Value::F32(_) => T_F32,
            Value::Bool(_) => T_BOOL,
            Value::String(_) => T_STRING,
            Value::Array(_) => T_ARRAY,
            Value::U64(_) => T_U64,
            Value::I64(_) => T_I64,
            Value::F64(_) => T_F64,
        }
    }

    /// The value as a non-negative integer, whatever integer type the file used.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

pub(super) fn array_type_id(a: &Array) -> (u32, usize) {
    match a {
        Array::U8(v) => (T_U8, v.len()),
        Array::I8(v) => (T_I8, v.len()),
        Array::U16(v) => (T_U16, v.len()),
        Array::I16(v) => (T_I16, v.len()),
        Array::U32(v) => (T_U32, v.len()),
        Array::I32(v) => (T_I32, v.len()),
        Array::F32(v) => (T_F32, v.len()),
        Array::Bool(v) => (T_BOOL, v.len()),
        Array::String(v) => (T_STRING, v.len()),
        Array::U64(v) => (T_U64, v.len()),
        Array::I64(v) => (T_I64, v.len()),
        Array::F64(v) => (T_F64, v.len()),
    }
}

pub(super) fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => write_string(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => {
            let (ty, n) = array_type_id(a);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(n as u64).to_le_bytes());
            macro_rules! each {
                ($v:expr) => {
                    $v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
                };
            }
            match a {
                Array::U8(v) => out.extend_from_slice(v),
                Array::I8(v) => v.iter().for_each(|x| out.push(*x as u8)),
                Array::U16(v) => each!(v),
                Array::I16(v) => each!(v),
                Array::U32(v) => each!(v),
                Array::I32(v) => each!(v),
                Array::F32(v) => each!(v),
                Array::U64(v) => each!(v),
                Array::I64(v) => each!(v),
                Array::F64(v) => each!(v),
                Array::Bool(v) => v.iter().for_each(|x| out.push(*x as u8)),
                Array::String(v) => v.iter().for_each(|s| write_string(out, s)),
            }
        }
    }
}

