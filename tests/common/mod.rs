pub mod chaos;
pub mod env;
pub mod schema;
pub mod signing;
