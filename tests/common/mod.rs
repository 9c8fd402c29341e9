pub mod schema;
pub mod env;
