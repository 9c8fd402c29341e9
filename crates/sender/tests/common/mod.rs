pub mod browser;
pub mod chaos;
pub mod env;
pub mod fixtures;
pub mod needs;
pub mod receiver;
pub mod schema;
pub mod signing;
