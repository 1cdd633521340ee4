//! The browser entry: a thin wasm-bindgen shim over [`crate::tasks`]; the JavaScript API is in `js/`.
//!
//! Rules of this boundary (wasm-bindgen issue 4440: JS may call again while a Rust future is suspended):
//! methods take `&self`, never `&mut self`; state that async calls share sits in `Rc` and is cloned into the futures;
//! the JS wrapper also queues calls, so two calls never run at once. Errors become rejected promises carrying a JS
//! `Error` with our message. A panic is logged by `console_error_panic_hook` and reported to the listener JS
//! registered ([`set_panic_listener`]), which rejects the call in flight (a trap inside a suspended future would
//! otherwise leave its promise pending forever) and makes the wrapper instantiate a fresh module for the next load.

use std::cell::RefCell;
use std::sync::Once;

use wasm_bindgen::prelude::*;

thread_local! {
    static PANIC_LISTENER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            console_error_panic_hook::hook(info);
            let message = info.to_string();
            PANIC_LISTENER.with(|l| {
                if let Ok(l) = l.try_borrow() {
                    if let Some(f) = l.as_ref() {
                        let _ = f.call1(&JsValue::NULL, &JsValue::from_str(&message));
                    }
                }
            });
        }));
    });
}

#[wasm_bindgen(start)]
fn start() {
    install_panic_hook();
}

/// Registers `f(message)`, called when Rust panics (after the message is logged to the console).
#[wasm_bindgen(js_name = setPanicListener)]
pub fn set_panic_listener(f: js_sys::Function) {
    install_panic_hook();
    PANIC_LISTENER.with(|l| *l.borrow_mut() = Some(f));
}

/// The crate version, for bug reports.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Panics on purpose, so the browser tests can check that a panic becomes a rejected promise and the next load
/// still works. Not part of the public API.
#[wasm_bindgen(js_name = __debugPanic)]
pub fn debug_panic() {
    panic!("deliberate panic (__debugPanic)");
}

/// A `crate::Error` as a JS `Error` with our message (which says how to fix the problem).
#[allow(dead_code)]
fn js_err(e: crate::Error) -> JsError {
    JsError::new(&e.to_string())
}
