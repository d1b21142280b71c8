pub use fabric;
