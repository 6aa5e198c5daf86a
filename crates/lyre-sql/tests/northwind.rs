//! The SQL corpus: queries over a Northwind-shaped dataset, each run by Lyre and by
//! SQLite (in-process, the oracle) on the same rows, and the answers compared.
//!
//! The data is generated (deterministically) with Northwind's tables and columns,
//! loaded into Lyre through the table API and into SQLite attached as `northwind`, so
//! one query text runs on both. Queries whose answer has a defined order are
//! compared row by row; the others as multisets. Values compare as SQL sees them
//! (an integral float equals the integer). Where Lyre follows Harper instead of
//! SQLite, the query is in `harper_differences` with the expected answer written
//! out.

use std::sync::Arc;

use lyre_core::catalog::TableSpec;
use lyre_core::{Context, Engine, EngineOptions, Object, Value};
use lyre_sql::Outcome;

/// A tiny deterministic generator (so the dataset is the same on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

const CITIES: [(&str, &str); 8] = [
    ("Berlin", "Germany"),
    ("London", "UK"),
    ("Madrid", "Spain"),
    ("Paris", "France"),
    ("Seattle", "USA"),
    ("Portland", "USA"),
    ("Lyon", "France"),
    ("Sevilla", "Spain"),
];
const NAMES: [&str; 10] =
    ["Anders", "Berglund", "Chang", "Davolio", "Fuller", "Leverling", "Peacock", "Suyama", "King", "Callahan"];

/// Northwind's tables: `(name, primary key, rows)`.
fn dataset() -> Vec<(&'static str, &'static str, Vec<Object>)> {
    let mut rng = Lcg(42);
    let object = |pairs: Vec<(&str, Value)>| pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Object>();
    let s = |v: &str| Value::String(v.to_string());
    let categories: Vec<Object> = [
        "Beverages",
        "Condiments",
        "Confections",
        "Dairy Products",
        "Grains/Cereals",
        "Meat/Poultry",
        "Produce",
        "Seafood",
    ]
    .iter()
    .enumerate()
    .map(|(i, name)| {
        object(vec![
            ("CategoryID", Value::Int(i as i64 + 1)),
            ("CategoryName", s(name)),
            ("Description", s(&format!("{name} of every kind"))),
        ])
    })
    .collect();
    let suppliers: Vec<Object> = (1..=10)
        .map(|i| {
            let (city, country) = CITIES[(i as usize * 3) % CITIES.len()];
            object(vec![
                ("SupplierID", Value::Int(i)),
                ("CompanyName", s(&format!("Supplier {i:02}"))),
                ("ContactName", s(NAMES[i as usize % NAMES.len()])),
                ("City", s(city)),
                ("Country", s(country)),
            ])
        })
        .collect();
    let products: Vec<Object> = (1..=40)
        .map(|i| {
            object(vec![
                ("ProductID", Value::Int(i)),
                (
                    "ProductName",
                    s(&format!(
                        "{} {}",
                        ["Chai", "Chang", "Aniseed", "Tofu", "Pavlova", "Konbu", "Ikura", "Queso"][i as usize % 8],
                        i
                    )),
                ),
                ("SupplierID", Value::Int(1 + (i * 7) % 10)),
                ("CategoryID", Value::Int(1 + (i * 3) % 8)),
                ("UnitPrice", Value::Float((rng.next(20_000) as f64) / 100.0 + 1.0)),
                ("UnitsInStock", Value::Int(rng.next(120) as i64)),
                ("Discontinued", Value::Int(i64::from(i % 9 == 0))),
            ])
        })
        .collect();
    let customers: Vec<Object> = (0..30)
        .map(|i| {
            let (city, country) = CITIES[i % CITIES.len()];
            let id: String = [b'A' + (i % 26) as u8, b'L' + (i % 7) as u8, b'F' + (i / 7) as u8, b'K', b'I']
                .iter()
                .map(|b| *b as char)
                .collect();
            object(vec![
                ("CustomerID", s(&id)),
                ("CompanyName", s(&format!("{} Trading {i}", NAMES[i % NAMES.len()]))),
                ("ContactName", s(NAMES[(i * 3) % NAMES.len()])),
                ("City", s(city)),
                ("Country", s(country)),
                ("Region", if i % 3 == 0 { Value::Null } else { s(&format!("R{}", i % 4)) }),
            ])
        })
        .collect();
    let customer_ids: Vec<String> =
        customers.iter().map(|c| c["CustomerID"].as_str().unwrap_or_default().to_string()).collect();
    let employees: Vec<Object> = (1..=9)
        .map(|i| {
            let (city, country) = CITIES[(i as usize * 5) % CITIES.len()];
            object(vec![
                ("EmployeeID", Value::Int(i)),
                ("LastName", s(NAMES[i as usize])),
                (
                    "FirstName",
                    s(["Nancy", "Andrew", "Janet", "Margaret", "Steven", "Michael", "Robert", "Laura", "Anne"]
                        [i as usize - 1]),
                ),
                (
                    "Title",
                    s(if i == 2 {
                        "Vice President"
                    } else if i % 3 == 0 {
                        "Sales Manager"
                    } else {
                        "Sales Representative"
                    }),
                ),
                ("ReportsTo", if i == 2 { Value::Null } else { Value::Int(2) }),
                ("HireDate", s(&format!("199{}-0{}-1{}", i % 4, 1 + i % 9, i % 9))),
                ("City", s(city)),
                ("Country", s(country)),
            ])
        })
        .collect();
    let mut orders = Vec::new();
    let mut details = Vec::new();
    for order in 10_248..10_448i64 {
        let customer = &customer_ids[rng.next(27) as usize];
        let (_, country) = CITIES[rng.next(CITIES.len() as u64) as usize];
        orders.push(object(vec![
            ("OrderID", Value::Int(order)),
            ("CustomerID", s(customer)),
            ("EmployeeID", Value::Int(1 + rng.next(9) as i64)),
            ("OrderDate", s(&format!("1997-{:02}-{:02}", 1 + rng.next(12), 1 + rng.next(28)))),
            ("ShipCountry", s(country)),
            ("Freight", Value::Float(rng.next(50_000) as f64 / 100.0)),
            ("ShipRegion", if order % 4 == 0 { Value::Null } else { s(&format!("R{}", order % 3)) }),
        ]));
        for line in 0..(1 + rng.next(4) as i64) {
            let product = 1 + rng.next(40) as i64;
            details.push(object(vec![
                ("id", Value::Int(order * 10 + line)),
                ("OrderID", Value::Int(order)),
                ("ProductID", Value::Int(product)),
                ("UnitPrice", Value::Float((rng.next(10_000) as f64) / 100.0 + 0.5)),
                ("Quantity", Value::Int(1 + rng.next(60) as i64)),
                ("Discount", Value::Float([0.0, 0.05, 0.1, 0.25][rng.next(4) as usize])),
            ]));
        }
    }
    let regions: Vec<Object> = ["Eastern", "Western", "Northern", "Southern"]
        .iter()
        .enumerate()
        .map(|(i, d)| object(vec![("RegionID", Value::Int(i as i64 + 1)), ("RegionDescription", s(d))]))
        .collect();
    let territories: Vec<Object> = (0..20)
        .map(|i| {
            object(vec![
                ("TerritoryID", s(&format!("{:05}", 1000 + i * 37))),
                ("TerritoryDescription", s(&format!("{} {}", CITIES[i % CITIES.len()].0, i))),
                ("RegionID", Value::Int(1 + (i as i64 % 4))),
            ])
        })
        .collect();
    vec![
        ("categories", "CategoryID", categories),
        ("suppliers", "SupplierID", suppliers),
        ("products", "ProductID", products),
        ("customers", "CustomerID", customers),
        ("employees", "EmployeeID", employees),
        ("orders", "OrderID", orders),
        ("order_details", "id", details),
        ("region", "RegionID", regions),
        ("territories", "TerritoryID", territories),
    ]
}

/// An engine holding the dataset in database `northwind`.
async fn lyre(dir: &std::path::Path, data: &[(&str, &str, Vec<Object>)]) -> Arc<Engine> {
    let options = EngineOptions::for_tests(dir);
    let (engine, _) = Engine::open(options).await.expect("engine opens");
    let ctx = Context::system();
    let db = engine.create_database(&ctx, "northwind").await.expect("database");
    for (name, key, rows) in data {
        db.create_table(&ctx, TableSpec::dynamic(*name, *key)).await.expect("table");
        db.table(name).expect("table").insert(&ctx, rows.clone()).await.expect("rows");
    }
    engine
}

/// An SQLite connection holding the dataset in schema `northwind`.
fn sqlite(data: &[(&str, &str, Vec<Object>)]) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_in_memory().expect("sqlite");
    conn.execute_batch("ATTACH DATABASE ':memory:' AS northwind").expect("attach");
    for (name, key, rows) in data {
        let columns: Vec<&String> = rows[0].keys().collect();
        let defs: Vec<String> = columns
            .iter()
            .map(|c| {
                let kind = match &rows[0][c.as_str()] {
                    Value::Int(_) => "INTEGER",
                    Value::Float(_) => "REAL",
                    _ => "TEXT",
                };
                if c.as_str() == *key { format!("\"{c}\" {kind} PRIMARY KEY") } else { format!("\"{c}\" {kind}") }
            })
            .collect();
        conn.execute_batch(&format!("CREATE TABLE northwind.{name} ({})", defs.join(", "))).expect("create");
        let marks = vec!["?"; columns.len()].join(", ");
        let mut insert = conn.prepare(&format!("INSERT INTO northwind.{name} VALUES ({marks})")).expect("prepare");
        for row in rows {
            let values: Vec<rusqlite::types::Value> = columns
                .iter()
                .map(|c| match &row[c.as_str()] {
                    Value::Int(i) => rusqlite::types::Value::Integer(*i),
                    Value::Float(f) => rusqlite::types::Value::Real(*f),
                    Value::String(s) => rusqlite::types::Value::Text(s.clone()),
                    _ => rusqlite::types::Value::Null,
                })
                .collect();
            insert.execute(rusqlite::params_from_iter(values)).expect("insert");
        }
    }
    conn
}

/// A value as the comparison sees it.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
enum Cell {
    Null,
    Number(f64),
    Text(String),
}

impl Cell {
    fn same(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Number(a), Cell::Number(b)) => (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0),
            _ => self == other,
        }
    }

    fn key(&self) -> String {
        match self {
            Cell::Null => "0".into(),
            Cell::Number(n) => format!("1{:020.6}", n + 1e12),
            Cell::Text(s) => format!("2{s}"),
        }
    }
}

fn lyre_cell(value: &Value) -> Cell {
    match value {
        Value::Null => Cell::Null,
        Value::Int(i) => Cell::Number(*i as f64),
        Value::Float(f) => Cell::Number(*f),
        Value::Bool(b) => Cell::Number(f64::from(u8::from(*b))),
        Value::String(s) => Cell::Text(s.clone()),
        other => Cell::Text(serde_json::to_string(other).unwrap_or_default()),
    }
}

fn sqlite_rows(conn: &rusqlite::Connection, sql: &str) -> Vec<Vec<Cell>> {
    let mut statement = conn.prepare(sql).unwrap_or_else(|e| panic!("SQLite refused {sql}: {e}"));
    let columns = statement.column_count();
    let rows = statement
        .query_map([], |row| {
            (0..columns)
                .map(|i| {
                    Ok(match row.get::<_, rusqlite::types::Value>(i)? {
                        rusqlite::types::Value::Null => Cell::Null,
                        rusqlite::types::Value::Integer(i) => Cell::Number(i as f64),
                        rusqlite::types::Value::Real(f) => Cell::Number(f),
                        rusqlite::types::Value::Text(s) => Cell::Text(s),
                        rusqlite::types::Value::Blob(_) => Cell::Text("blob".into()),
                    })
                })
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .expect("query");
    rows.collect::<rusqlite::Result<Vec<_>>>().expect("rows")
}

async fn lyre_rows(engine: &Arc<Engine>, sql: &str) -> Vec<Vec<Cell>> {
    match lyre_sql::execute(engine.clone(), Context::system(), sql, lyre_sql::DEFAULT_MEMORY_BUDGET).await {
        // `*` also answers Harper's timestamps, which SQLite's tables lack.
        Ok(Outcome::Rows(rows)) => rows
            .iter()
            .map(|row| row.iter().filter(|(k, _)| !is_stamp(k)).map(|(_, v)| lyre_cell(v)).collect())
            .collect(),
        other => panic!("Lyre answered {sql} with {other:?}"),
    }
}

fn is_stamp(key: &str) -> bool {
    key.starts_with("__createdtime__") || key.starts_with("__updatedtime__")
}

/// Whether the two answers agree: row by row when `ordered`, else as multisets.
fn agree(mut ours: Vec<Vec<Cell>>, mut theirs: Vec<Vec<Cell>>, ordered: bool) -> bool {
    if !ordered {
        let key = |row: &Vec<Cell>| row.iter().map(Cell::key).collect::<Vec<_>>().join("|");
        ours.sort_by_key(key);
        theirs.sort_by_key(key);
    }
    ours.len() == theirs.len()
        && ours.iter().zip(&theirs).all(|(a, b)| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y)))
}

/// `(ordered, query)`: every query of the corpus, checked against SQLite.
const CORPUS: &[(bool, &str)] = &[
    // Projections, aliases, *.
    (false, "SELECT * FROM northwind.categories"),
    (false, "SELECT CategoryName FROM northwind.categories"),
    (false, "SELECT CategoryName AS name, CategoryID id FROM northwind.categories"),
    (false, "SELECT c.CategoryName FROM northwind.categories c"),
    (false, "SELECT c.* FROM northwind.categories c WHERE c.CategoryID < 3"),
    (false, "SELECT `ProductName`, `UnitPrice` FROM `northwind`.`products`"),
    // WHERE: comparisons, logic, IN, BETWEEN, LIKE, NULL.
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice > 100"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice >= 100.5 AND UnitsInStock < 50"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice < 20 OR UnitsInStock = 0"),
    (false, "SELECT ProductID FROM northwind.products WHERE NOT (UnitPrice < 20)"),
    (false, "SELECT ProductID FROM northwind.products WHERE CategoryID <> 3"),
    (false, "SELECT ProductID FROM northwind.products WHERE CategoryID != 3 AND SupplierID = 5"),
    (false, "SELECT ProductID FROM northwind.products WHERE CategoryID IN (1, 2, 8)"),
    (false, "SELECT ProductID FROM northwind.products WHERE CategoryID NOT IN (1, 2, 8)"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitsInStock BETWEEN 10 AND 40"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitsInStock NOT BETWEEN 10 AND 40"),
    (false, "SELECT ProductName FROM northwind.products WHERE ProductName LIKE 'Ch%'"),
    (false, "SELECT ProductName FROM northwind.products WHERE ProductName LIKE 'ch%'"),
    (false, "SELECT ProductName FROM northwind.products WHERE ProductName LIKE '%u 1_'"),
    (false, "SELECT ProductName FROM northwind.products WHERE ProductName NOT LIKE '%a%'"),
    (false, "SELECT ProductName FROM northwind.products WHERE ProductName LIKE '_hai%'"),
    (false, "SELECT CustomerID FROM northwind.customers WHERE Region IS NULL"),
    (false, "SELECT CustomerID FROM northwind.customers WHERE Region IS NOT NULL"),
    (false, "SELECT CustomerID FROM northwind.customers WHERE Region = 'R1'"),
    (false, "SELECT CustomerID FROM northwind.customers WHERE Region <> 'R1'"),
    (
        false,
        "SELECT CustomerID FROM northwind.customers WHERE Country = 'USA' AND (City = 'Seattle' OR City = 'Portland')",
    ),
    (false, "SELECT CustomerID FROM northwind.customers WHERE CustomerID >= 'C' AND CustomerID < 'M'"),
    (false, "SELECT EmployeeID FROM northwind.employees WHERE ReportsTo = 2"),
    (false, "SELECT EmployeeID FROM northwind.employees WHERE ReportsTo IS NULL OR Title = 'Sales Manager'"),
    (false, "SELECT OrderID FROM northwind.orders WHERE OrderDate BETWEEN '1997-03-01' AND '1997-05-31'"),
    (false, "SELECT OrderID FROM northwind.orders WHERE OrderDate LIKE '1997-07%'"),
    (false, "SELECT OrderID FROM northwind.orders WHERE Freight > 100 AND ShipRegion IS NULL"),
    (false, "SELECT OrderID FROM northwind.orders WHERE OrderID = 10300"),
    (false, "SELECT OrderID FROM northwind.orders WHERE OrderID IN (10300, 10301, 99999)"),
    (false, "SELECT * FROM northwind.orders WHERE OrderID = -1"),
    // ORDER BY, LIMIT, OFFSET.
    (true, "SELECT ProductID, UnitPrice FROM northwind.products ORDER BY UnitPrice DESC, ProductID LIMIT 5"),
    (true, "SELECT ProductID FROM northwind.products ORDER BY ProductID LIMIT 5 OFFSET 10"),
    (true, "SELECT ProductID FROM northwind.products ORDER BY ProductID DESC LIMIT 3"),
    (true, "SELECT ProductName, CategoryID FROM northwind.products ORDER BY CategoryID, ProductName"),
    (true, "SELECT CustomerID, Region FROM northwind.customers ORDER BY Region, CustomerID"),
    (true, "SELECT CustomerID, Region FROM northwind.customers ORDER BY Region DESC, CustomerID"),
    (true, "SELECT OrderID, Freight FROM northwind.orders WHERE Freight > 50 ORDER BY Freight LIMIT 10"),
    (true, "SELECT OrderID, Freight * 2 AS doubled FROM northwind.orders ORDER BY doubled DESC, OrderID LIMIT 5"),
    (true, "SELECT ProductName, UnitPrice FROM northwind.products ORDER BY 2 DESC, 1 LIMIT 4"),
    (true, "SELECT OrderID FROM northwind.orders ORDER BY OrderDate, OrderID LIMIT 7 OFFSET 3"),
    (true, "SELECT ProductID FROM northwind.products ORDER BY UnitsInStock * UnitPrice DESC, ProductID LIMIT 5"),
    (true, "SELECT LastName FROM northwind.employees ORDER BY LENGTH(LastName), LastName"),
    (false, "SELECT ProductID FROM northwind.products LIMIT 0"),
    (true, "SELECT OrderID FROM northwind.orders ORDER BY OrderID LIMIT 5 OFFSET 1000"),
    // Expressions and functions.
    (false, "SELECT ProductID, UnitPrice * UnitsInStock AS value FROM northwind.products"),
    (false, "SELECT ProductID, UnitPrice + 1, UnitPrice - 1 FROM northwind.products"),
    (false, "SELECT OrderID, Quantity * UnitPrice * (1 - Discount) AS total FROM northwind.order_details"),
    (false, "SELECT UPPER(CategoryName), LOWER(CategoryName) FROM northwind.categories"),
    (false, "SELECT LENGTH(CompanyName) FROM northwind.customers"),
    (false, "SELECT SUBSTRING(CompanyName, 1, 3), SUBSTR(CompanyName, 4) FROM northwind.customers"),
    (false, "SELECT TRIM('  x  '), LTRIM('  y'), RTRIM('z  ') FROM northwind.region"),
    (false, "SELECT REPLACE(ProductName, 'a', 'A') FROM northwind.products"),
    (false, "SELECT FirstName || ' ' || LastName FROM northwind.employees"),
    (false, "SELECT CONCAT(FirstName, ' ', LastName) AS name FROM northwind.employees"),
    (false, "SELECT ABS(Freight - 250), ROUND(Freight) FROM northwind.orders"),
    (false, "SELECT COALESCE(Region, 'none') FROM northwind.customers"),
    (false, "SELECT IFNULL(ShipRegion, '-') FROM northwind.orders"),
    (false, "SELECT NULLIF(Country, 'USA') FROM northwind.customers"),
    (
        false,
        "SELECT CASE WHEN UnitPrice > 100 THEN 'high' WHEN UnitPrice > 50 THEN 'mid' ELSE 'low' END FROM northwind.products",
    ),
    (false, "SELECT CASE CategoryID WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END AS c FROM northwind.products"),
    (false, "SELECT CAST(UnitPrice AS INTEGER) FROM northwind.products"),
    (false, "SELECT CAST(ProductID AS TEXT) FROM northwind.products"),
    (false, "SELECT ProductID % 7 FROM northwind.products"),
    (false, "SELECT -UnitsInStock FROM northwind.products"),
    (false, "SELECT ProductID FROM northwind.products WHERE LOWER(ProductName) = 'chai 8'"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice * UnitsInStock > 5000"),
    (false, "SELECT ProductID FROM northwind.products WHERE LENGTH(ProductName) > 7"),
    // Aggregates and grouping.
    (false, "SELECT COUNT(*) FROM northwind.orders"),
    (false, "SELECT COUNT(ShipRegion) FROM northwind.orders"),
    (false, "SELECT COUNT(DISTINCT CustomerID) FROM northwind.orders"),
    (false, "SELECT SUM(Quantity), MIN(Quantity), MAX(Quantity) FROM northwind.order_details"),
    (false, "SELECT AVG(Freight) FROM northwind.orders"),
    (false, "SELECT MIN(CompanyName), MAX(CompanyName) FROM northwind.customers"),
    (false, "SELECT MIN(OrderDate), MAX(OrderDate) FROM northwind.orders"),
    (false, "SELECT CategoryID, COUNT(*) FROM northwind.products GROUP BY CategoryID"),
    (false, "SELECT CategoryID, COUNT(*) AS n, AVG(UnitPrice) AS price FROM northwind.products GROUP BY CategoryID"),
    (false, "SELECT Country, City, COUNT(*) FROM northwind.customers GROUP BY Country, City"),
    (false, "SELECT CustomerID, SUM(Freight) FROM northwind.orders GROUP BY CustomerID HAVING SUM(Freight) > 1000"),
    (false, "SELECT CustomerID, COUNT(*) AS n FROM northwind.orders GROUP BY CustomerID HAVING COUNT(*) >= 10"),
    (true, "SELECT EmployeeID, COUNT(*) AS n FROM northwind.orders GROUP BY EmployeeID ORDER BY n DESC, EmployeeID"),
    (true, "SELECT ShipCountry, MAX(Freight) AS top FROM northwind.orders GROUP BY ShipCountry ORDER BY top DESC"),
    (
        true,
        "SELECT ShipCountry, COUNT(*) FROM northwind.orders GROUP BY ShipCountry ORDER BY COUNT(*) DESC, ShipCountry",
    ),
    (false, "SELECT ShipRegion, COUNT(*) FROM northwind.orders GROUP BY ShipRegion"),
    (false, "SELECT OrderID, SUM(Quantity * UnitPrice) FROM northwind.order_details GROUP BY OrderID"),
    (false, "SELECT COUNT(*) FROM northwind.products WHERE Discontinued = 1"),
    (false, "SELECT Discontinued, COUNT(*), SUM(UnitsInStock) FROM northwind.products GROUP BY Discontinued"),
    (false, "SELECT CategoryID, COUNT(DISTINCT SupplierID) FROM northwind.products GROUP BY CategoryID"),
    (false, "SELECT COUNT(*) FROM northwind.orders WHERE Freight > 10000"),
    (
        false,
        "SELECT Country, COUNT(*) FROM northwind.customers WHERE Region IS NOT NULL GROUP BY Country HAVING COUNT(*) > 1",
    ),
    (
        true,
        "SELECT SUBSTRING(OrderDate, 1, 7) AS month, COUNT(*) AS n FROM northwind.orders GROUP BY SUBSTRING(OrderDate, 1, 7) ORDER BY month",
    ),
    (
        false,
        "SELECT CASE WHEN Freight > 250 THEN 'heavy' ELSE 'light' END AS kind, COUNT(*) FROM northwind.orders GROUP BY CASE WHEN Freight > 250 THEN 'heavy' ELSE 'light' END",
    ),
    // DISTINCT.
    (false, "SELECT DISTINCT Country FROM northwind.customers"),
    (false, "SELECT DISTINCT Country, City FROM northwind.customers"),
    (true, "SELECT DISTINCT ShipCountry FROM northwind.orders ORDER BY ShipCountry"),
    (false, "SELECT DISTINCT Region FROM northwind.customers"),
    // Joins.
    (
        false,
        "SELECT p.ProductName, c.CategoryName FROM northwind.products p INNER JOIN northwind.categories c ON p.CategoryID = c.CategoryID",
    ),
    (
        false,
        "SELECT p.ProductName, c.CategoryName FROM northwind.products p JOIN northwind.categories c ON c.CategoryID = p.CategoryID WHERE c.CategoryName = 'Seafood'",
    ),
    (
        false,
        "SELECT o.OrderID, c.CompanyName FROM northwind.orders o JOIN northwind.customers c ON o.CustomerID = c.CustomerID WHERE o.Freight > 300",
    ),
    (
        false,
        "SELECT c.CustomerID, o.OrderID FROM northwind.customers c LEFT JOIN northwind.orders o ON o.CustomerID = c.CustomerID",
    ),
    (
        false,
        "SELECT c.CustomerID FROM northwind.customers c LEFT JOIN northwind.orders o ON o.CustomerID = c.CustomerID WHERE o.OrderID IS NULL",
    ),
    (
        false,
        "SELECT o.OrderID, c.CustomerID FROM northwind.customers c RIGHT JOIN northwind.orders o ON o.CustomerID = c.CustomerID",
    ),
    (
        false,
        "SELECT e.LastName, m.LastName AS manager FROM northwind.employees e LEFT JOIN northwind.employees m ON e.ReportsTo = m.EmployeeID",
    ),
    (
        false,
        "SELECT r.RegionDescription, t.TerritoryDescription FROM northwind.region r CROSS JOIN northwind.territories t WHERE t.RegionID = r.RegionID",
    ),
    (false, "SELECT COUNT(*) FROM northwind.region r CROSS JOIN northwind.categories c"),
    (
        false,
        "SELECT o.OrderID, d.ProductID, p.ProductName FROM northwind.orders o JOIN northwind.order_details d ON d.OrderID = o.OrderID JOIN northwind.products p ON p.ProductID = d.ProductID WHERE o.OrderID < 10260",
    ),
    (
        false,
        "SELECT c.CategoryName, SUM(d.Quantity) AS units FROM northwind.order_details d JOIN northwind.products p ON p.ProductID = d.ProductID JOIN northwind.categories c ON c.CategoryID = p.CategoryID GROUP BY c.CategoryName",
    ),
    (
        true,
        "SELECT s.CompanyName, COUNT(*) AS n FROM northwind.suppliers s JOIN northwind.products p ON p.SupplierID = s.SupplierID GROUP BY s.CompanyName ORDER BY n DESC, s.CompanyName",
    ),
    (
        false,
        "SELECT e.FirstName, COUNT(o.OrderID) FROM northwind.employees e LEFT JOIN northwind.orders o ON o.EmployeeID = e.EmployeeID GROUP BY e.FirstName",
    ),
    (
        false,
        "SELECT p.ProductName FROM northwind.products p LEFT JOIN northwind.order_details d ON d.ProductID = p.ProductID WHERE d.id IS NULL",
    ),
    (
        false,
        "SELECT o.OrderID FROM northwind.orders o JOIN northwind.customers c ON o.CustomerID = c.CustomerID AND c.Country = o.ShipCountry",
    ),
    (
        false,
        "SELECT o.OrderID, e.LastName FROM northwind.orders o JOIN northwind.employees e ON o.EmployeeID = e.EmployeeID WHERE e.Country = 'USA' AND o.Freight < 20",
    ),
    (false, "SELECT c.City, s.CompanyName FROM northwind.customers c JOIN northwind.suppliers s ON s.City = c.City"),
    (
        true,
        "SELECT o.OrderID, c.CompanyName FROM northwind.orders o JOIN northwind.customers c ON o.CustomerID = c.CustomerID ORDER BY o.Freight DESC, o.OrderID LIMIT 5",
    ),
    (
        false,
        "SELECT p.ProductID, c.CategoryName FROM northwind.products p JOIN northwind.categories c ON p.CategoryID = c.CategoryID WHERE p.UnitPrice > 150 OR c.CategoryName LIKE 'D%'",
    ),
    (
        false,
        "SELECT t.TerritoryID, r.RegionDescription FROM northwind.territories t LEFT JOIN northwind.region r ON r.RegionID = t.RegionID AND r.RegionID > 2",
    ),
    // Joins no index serves: to a derived table (hashed) and on expressions (nested loop).
    (
        false,
        "SELECT c.CategoryID, x.n FROM northwind.categories c LEFT JOIN (SELECT CategoryID, COUNT(*) AS n FROM northwind.products WHERE UnitPrice > 150 GROUP BY CategoryID) x ON x.CategoryID = c.CategoryID",
    ),
    (
        false,
        "SELECT c.CategoryID, x.n FROM northwind.categories c INNER JOIN (SELECT CategoryID, COUNT(*) AS n FROM northwind.products WHERE UnitPrice > 150 GROUP BY CategoryID) x ON x.CategoryID = c.CategoryID",
    ),
    (
        false,
        "SELECT x.CategoryID, c.CategoryName FROM (SELECT CategoryID FROM northwind.products WHERE UnitsInStock < 10) x RIGHT JOIN northwind.categories c ON c.CategoryID = x.CategoryID",
    ),
    (
        false,
        "SELECT c.CustomerID, s.SupplierID FROM northwind.customers c LEFT JOIN northwind.suppliers s ON LOWER(s.City) = LOWER(c.City)",
    ),
    (
        false,
        "SELECT e.EmployeeID, m.EmployeeID FROM northwind.employees e JOIN northwind.employees m ON m.EmployeeID + 1 = e.EmployeeID",
    ),
    (
        false,
        "SELECT o.OrderID, t.TerritoryID FROM northwind.orders o JOIN northwind.territories t ON t.RegionID = o.EmployeeID AND o.Freight > 450",
    ),
    // More of each, over every table.
    (false, "SELECT SupplierID, CompanyName FROM northwind.suppliers WHERE Country IN ('USA', 'UK')"),
    (false, "SELECT SupplierID FROM northwind.suppliers WHERE City LIKE 'L%' OR City LIKE '%a'"),
    (false, "SELECT SupplierID FROM northwind.suppliers WHERE ContactName BETWEEN 'B' AND 'F'"),
    (true, "SELECT Country, COUNT(*) AS n FROM northwind.suppliers GROUP BY Country ORDER BY n DESC, Country"),
    (false, "SELECT TerritoryID FROM northwind.territories WHERE RegionID = 2 AND TerritoryDescription LIKE '%1%'"),
    (true, "SELECT RegionID, COUNT(*) FROM northwind.territories GROUP BY RegionID ORDER BY RegionID"),
    (false, "SELECT TerritoryID FROM northwind.territories WHERE TerritoryID > '01200'"),
    (false, "SELECT TerritoryID FROM northwind.territories WHERE TerritoryID LIKE '01_00'"),
    (false, "SELECT EmployeeID, FirstName FROM northwind.employees WHERE Title LIKE '%Manager'"),
    (false, "SELECT EmployeeID FROM northwind.employees WHERE HireDate < '1992-01-01'"),
    (true, "SELECT LastName, HireDate FROM northwind.employees ORDER BY HireDate DESC, LastName"),
    (false, "SELECT Title, COUNT(*) FROM northwind.employees GROUP BY Title"),
    (false, "SELECT Country, MIN(HireDate), MAX(HireDate) FROM northwind.employees GROUP BY Country"),
    (false, "SELECT id FROM northwind.order_details WHERE Discount = 0.25 AND Quantity > 50"),
    (false, "SELECT id FROM northwind.order_details WHERE Discount IN (0.05, 0.1) AND Quantity BETWEEN 5 AND 6"),
    (
        false,
        "SELECT ProductID, SUM(Quantity) FROM northwind.order_details GROUP BY ProductID HAVING SUM(Quantity) > 200",
    ),
    (
        true,
        "SELECT ProductID, COUNT(*) AS lines FROM northwind.order_details GROUP BY ProductID ORDER BY lines DESC, ProductID LIMIT 5",
    ),
    (false, "SELECT OrderID, MAX(Discount) FROM northwind.order_details GROUP BY OrderID HAVING MAX(Discount) = 0"),
    (
        false,
        "SELECT AVG(Quantity), MIN(UnitPrice), MAX(UnitPrice), COUNT(DISTINCT ProductID) FROM northwind.order_details",
    ),
    (false, "SELECT COUNT(*) FROM northwind.order_details WHERE UnitPrice * Quantity > 1000"),
    (false, "SELECT ROUND(SUM(UnitPrice * Quantity)) FROM northwind.order_details"),
    (false, "SELECT DISTINCT Discount FROM northwind.order_details"),
    (false, "SELECT DISTINCT CategoryID, SupplierID FROM northwind.products WHERE UnitPrice < 50"),
    (false, "SELECT ProductID FROM northwind.products WHERE ProductName IN ('Chai 8', 'Tofu 3', 'Nothing')"),
    (
        false,
        "SELECT ProductID FROM northwind.products WHERE UnitsInStock = 0 OR UnitsInStock > 110 OR Discontinued = 1",
    ),
    (
        false,
        "SELECT ProductID FROM northwind.products WHERE NOT (CategoryID = 1 OR CategoryID = 2) AND UnitPrice > 100",
    ),
    (
        false,
        "SELECT ProductID FROM northwind.products WHERE (CategoryID = 1 AND UnitPrice > 50) OR (CategoryID = 2 AND UnitPrice < 50)",
    ),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice > 20 AND UnitPrice < 30"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice >= 20 AND UnitPrice <= 30 AND CategoryID >= 4"),
    (false, "SELECT ProductID FROM northwind.products WHERE 50 < UnitPrice"),
    (false, "SELECT ProductID FROM northwind.products WHERE UnitPrice BETWEEN 100 AND 50"),
    (false, "SELECT ProductID, CASE WHEN UnitsInStock = 0 THEN 'out' END AS stock FROM northwind.products"),
    (
        false,
        "SELECT CategoryID, SUM(CASE WHEN Discontinued = 1 THEN 1 ELSE 0 END) AS gone FROM northwind.products GROUP BY CategoryID",
    ),
    (
        false,
        "SELECT CategoryID, AVG(UnitPrice) FROM northwind.products WHERE Discontinued = 0 GROUP BY CategoryID HAVING AVG(UnitPrice) > 90",
    ),
    (
        true,
        "SELECT CategoryID, MAX(UnitPrice) - MIN(UnitPrice) AS spread FROM northwind.products GROUP BY CategoryID ORDER BY spread DESC",
    ),
    (false, "SELECT UPPER(SUBSTRING(ProductName, 1, 1)) || LOWER(SUBSTRING(ProductName, 2)) FROM northwind.products"),
    (false, "SELECT LENGTH(REPLACE(CompanyName, ' ', '')) FROM northwind.customers"),
    (false, "SELECT CustomerID FROM northwind.customers WHERE UPPER(City) = 'LONDON'"),
    (false, "SELECT CustomerID FROM northwind.customers WHERE City LIKE 'l_ndon'"),
    (false, "SELECT CustomerID, COALESCE(Region, Country) FROM northwind.customers"),
    (true, "SELECT City, COUNT(*) AS n FROM northwind.customers GROUP BY City ORDER BY n DESC, City LIMIT 3"),
    (false, "SELECT Country FROM northwind.customers GROUP BY Country HAVING COUNT(DISTINCT City) > 1"),
    (false, "SELECT CustomerID FROM northwind.orders GROUP BY CustomerID HAVING MIN(Freight) > 50"),
    (
        false,
        "SELECT OrderID FROM northwind.orders WHERE CustomerID IN (SELECT CustomerID FROM northwind.customers WHERE Country = 'USA')",
    ),
    (
        false,
        "SELECT OrderID FROM northwind.orders WHERE EmployeeID IN (SELECT EmployeeID FROM northwind.employees WHERE Title = 'Sales Manager') AND Freight > 400",
    ),
    (false, "SELECT COUNT(*) FROM northwind.orders WHERE OrderDate >= '1997-06-01'"),
    (false, "SELECT ShipCountry, AVG(Freight) FROM northwind.orders GROUP BY ShipCountry"),
    (
        true,
        "SELECT EmployeeID, SUM(Freight) AS total FROM northwind.orders GROUP BY EmployeeID ORDER BY total DESC LIMIT 3",
    ),
    (false, "SELECT o.ShipCountry, COUNT(DISTINCT o.CustomerID) FROM northwind.orders o GROUP BY o.ShipCountry"),
    (
        false,
        "SELECT c.Country, COUNT(o.OrderID) FROM northwind.customers c JOIN northwind.orders o ON o.CustomerID = c.CustomerID GROUP BY c.Country",
    ),
    (
        false,
        "SELECT c.CompanyName FROM northwind.customers c JOIN northwind.orders o ON o.CustomerID = c.CustomerID WHERE o.Freight > 490",
    ),
    (
        false,
        "SELECT DISTINCT c.Country FROM northwind.customers c JOIN northwind.orders o ON o.CustomerID = c.CustomerID WHERE o.ShipCountry = c.Country",
    ),
    (
        false,
        "SELECT p.ProductName, s.CompanyName, c.CategoryName FROM northwind.products p JOIN northwind.suppliers s ON s.SupplierID = p.SupplierID JOIN northwind.categories c ON c.CategoryID = p.CategoryID WHERE p.UnitPrice > 180",
    ),
    (
        false,
        "SELECT s.Country, AVG(p.UnitPrice) FROM northwind.suppliers s JOIN northwind.products p ON p.SupplierID = s.SupplierID GROUP BY s.Country",
    ),
    (
        false,
        "SELECT s.SupplierID FROM northwind.suppliers s LEFT JOIN northwind.products p ON p.SupplierID = s.SupplierID AND p.UnitPrice > 190 WHERE p.ProductID IS NULL",
    ),
    (
        false,
        "SELECT e.EmployeeID, COUNT(DISTINCT o.CustomerID) FROM northwind.employees e JOIN northwind.orders o ON o.EmployeeID = e.EmployeeID GROUP BY e.EmployeeID",
    ),
    (
        false,
        "SELECT m.LastName, COUNT(*) FROM northwind.employees e JOIN northwind.employees m ON e.ReportsTo = m.EmployeeID GROUP BY m.LastName",
    ),
    (
        false,
        "SELECT d.OrderID, SUM(d.Quantity) FROM northwind.order_details d JOIN northwind.orders o ON o.OrderID = d.OrderID WHERE o.ShipCountry = 'France' GROUP BY d.OrderID",
    ),
    (
        false,
        "SELECT c.CategoryName, COUNT(DISTINCT d.OrderID) FROM northwind.categories c JOIN northwind.products p ON p.CategoryID = c.CategoryID JOIN northwind.order_details d ON d.ProductID = p.ProductID GROUP BY c.CategoryName",
    ),
    (
        true,
        "SELECT o.OrderID, SUM(d.Quantity * d.UnitPrice) AS value FROM northwind.orders o JOIN northwind.order_details d ON d.OrderID = o.OrderID GROUP BY o.OrderID ORDER BY value DESC LIMIT 5",
    ),
    (
        false,
        "SELECT r.RegionDescription, COUNT(t.TerritoryID) FROM northwind.region r LEFT JOIN northwind.territories t ON t.RegionID = r.RegionID GROUP BY r.RegionDescription",
    ),
    (
        false,
        "SELECT t.TerritoryID FROM northwind.territories t RIGHT JOIN northwind.region r ON r.RegionID = t.RegionID WHERE r.RegionDescription = 'Eastern'",
    ),
    (
        false,
        "SELECT r.RegionID, t.TerritoryID FROM northwind.region r CROSS JOIN northwind.territories t WHERE t.RegionID = 1 AND r.RegionID > 3",
    ),
    (
        false,
        "SELECT COUNT(*) FROM northwind.products p CROSS JOIN northwind.suppliers s WHERE p.SupplierID = s.SupplierID",
    ),
    (
        false,
        "SELECT a.ProductID, b.ProductID FROM northwind.products a JOIN northwind.products b ON a.CategoryID = b.CategoryID AND a.ProductID < b.ProductID WHERE a.UnitPrice > 150 AND b.UnitPrice > 150",
    ),
    (
        false,
        "SELECT x.c, COUNT(*) FROM (SELECT CategoryID AS c FROM northwind.products WHERE UnitPrice > 100) x GROUP BY x.c",
    ),
    (false, "SELECT y.Country FROM (SELECT DISTINCT Country FROM northwind.customers) AS y WHERE y.Country LIKE '%a%'"),
    (
        false,
        "SELECT ProductID FROM northwind.products WHERE UnitPrice = (SELECT MAX(UnitPrice) FROM northwind.products)",
    ),
    (
        false,
        "SELECT ProductID FROM northwind.products WHERE SupplierID IN (SELECT SupplierID FROM northwind.suppliers WHERE Country IN (SELECT Country FROM northwind.customers WHERE City = 'Sevilla'))",
    ),
    (true, "SELECT ProductID FROM northwind.products WHERE CategoryID = 3 ORDER BY UnitPrice DESC LIMIT 2 OFFSET 1"),
    (true, "SELECT CustomerID FROM northwind.customers ORDER BY CustomerID DESC LIMIT 4"),
    (true, "SELECT OrderID, ShipRegion FROM northwind.orders WHERE OrderID < 10270 ORDER BY ShipRegion DESC, OrderID"),
    (true, "SELECT ProductID FROM northwind.products ORDER BY UnitsInStock, ProductID DESC LIMIT 10"),
    // Indexed joins whose outer side spans several lookup batches.
    (
        false,
        "SELECT COUNT(*), SUM(p.UnitPrice) FROM northwind.region r CROSS JOIN northwind.order_details d JOIN northwind.products p ON p.ProductID = d.ProductID",
    ),
    (
        false,
        "SELECT r.RegionID, d.id, o.ShipRegion FROM northwind.region r CROSS JOIN northwind.order_details d LEFT JOIN northwind.orders o ON o.OrderID = d.OrderID AND o.ShipRegion = 'R1'",
    ),
    // Subqueries.
    (
        false,
        "SELECT ProductName FROM northwind.products WHERE CategoryID IN (SELECT CategoryID FROM northwind.categories WHERE CategoryName LIKE 'C%')",
    ),
    (
        false,
        "SELECT ProductName FROM northwind.products WHERE CategoryID NOT IN (SELECT CategoryID FROM northwind.categories WHERE CategoryName LIKE 'C%')",
    ),
    (
        false,
        "SELECT CustomerID FROM northwind.customers WHERE CustomerID NOT IN (SELECT CustomerID FROM northwind.orders)",
    ),
    (false, "SELECT OrderID FROM northwind.orders WHERE Freight > (SELECT AVG(Freight) FROM northwind.orders)"),
    (
        false,
        "SELECT CategoryName FROM northwind.categories WHERE EXISTS (SELECT 1 FROM northwind.products WHERE UnitPrice > 190)",
    ),
    (
        false,
        "SELECT CategoryName FROM northwind.categories WHERE NOT EXISTS (SELECT 1 FROM northwind.products WHERE UnitPrice > 100000)",
    ),
    (
        false,
        "SELECT x.CategoryID, x.n FROM (SELECT CategoryID, COUNT(*) AS n FROM northwind.products GROUP BY CategoryID) AS x WHERE x.n > 4",
    ),
    (
        true,
        "SELECT t.CustomerID, t.total FROM (SELECT CustomerID, SUM(Freight) AS total FROM northwind.orders GROUP BY CustomerID) t ORDER BY t.total DESC LIMIT 3",
    ),
    (
        false,
        "SELECT c.CategoryName, x.n FROM northwind.categories c JOIN (SELECT CategoryID, COUNT(*) AS n FROM northwind.products GROUP BY CategoryID) x ON x.CategoryID = c.CategoryID",
    ),
    (false, "SELECT MAX(n) FROM (SELECT EmployeeID, COUNT(*) AS n FROM northwind.orders GROUP BY EmployeeID) AS per"),
];

#[tokio::test]
async fn the_corpus_agrees_with_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset();
    let engine = lyre(dir.path(), &data).await;
    let conn = sqlite(&data);
    let mut failures = Vec::new();
    for (ordered, sql) in CORPUS {
        let theirs = sqlite_rows(&conn, sql);
        let ours = lyre_rows(&engine, sql).await;
        if !agree(ours.clone(), theirs.clone(), *ordered) {
            failures.push(format!("{sql}\n  Lyre:   {ours:?}\n  SQLite: {theirs:?}"));
        }
    }
    assert!(CORPUS.len() >= 200, "the corpus has {} queries", CORPUS.len());
    assert!(failures.is_empty(), "{} of {} queries disagree:\n{}", failures.len(), CORPUS.len(), failures.join("\n"));
}

/// Lyre's answer to `sql` as JSON, for the cases written out by hand.
async fn json(engine: &Arc<Engine>, sql: &str) -> serde_json::Value {
    match lyre_sql::execute(engine.clone(), Context::system(), sql, lyre_sql::DEFAULT_MEMORY_BUDGET).await {
        Ok(Outcome::Rows(rows)) => serde_json::to_value(&rows).expect("rows as JSON"),
        other => panic!("Lyre answered {sql} with {other:?}"),
    }
}

/// Where Lyre follows Harper rather than SQLite, the answers written out.
#[tokio::test]
async fn harper_differences() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset();
    let engine = lyre(dir.path(), &data).await;
    let conn = sqlite(&data);
    // `*` answers the primary key, Harper's two timestamps, then the attributes.
    let rows = json(&engine, "SELECT * FROM northwind.region WHERE RegionID = 1").await;
    let keys: Vec<&str> = rows[0].as_object().expect("a row").keys().map(String::as_str).collect();
    assert_eq!(keys, ["RegionID", "__createdtime__", "__updatedtime__", "RegionDescription"]);
    // ROUND is JavaScript's: halves round up (SQLite rounds them away from zero), on
    // the binary value scaled (1.005 × 100 is 100.4999…, so 1).
    let rows = json(
        &engine,
        "SELECT ROUND(-2.5) AS a, ROUND(2.5) AS b, ROUND(1.005, 2) AS c FROM northwind.region WHERE RegionID = 1",
    )
    .await;
    assert_eq!(rows, serde_json::json!([{"a": -2, "b": 3, "c": 1}]));
    assert_eq!(sqlite_rows(&conn, "SELECT ROUND(-2.5)"), vec![vec![Cell::Number(-3.0)]]);
    // SUM of no rows is 0 in Harper (NULL in SQL).
    let rows = json(&engine, "SELECT SUM(Freight) AS s FROM northwind.orders WHERE Freight < 0").await;
    assert_eq!(rows, serde_json::json!([{"s": 0}]));
    assert_eq!(
        sqlite_rows(&conn, "SELECT SUM(Freight) FROM northwind.orders WHERE Freight < 0"),
        vec![vec![Cell::Null]]
    );
    // Over rows whose values are all null it is NULL, in Harper and SQL alike, alone
    // and in groups.
    let all_null = "SELECT SUM(CASE WHEN Freight < 0 THEN Freight END) AS s FROM northwind.orders";
    assert_eq!(json(&engine, all_null).await, serde_json::json!([{"s": null}]));
    assert_eq!(sqlite_rows(&conn, all_null), vec![vec![Cell::Null]]);
    let grouped = "SELECT EmployeeID, SUM(CASE WHEN Freight < 0 THEN Freight END) AS s FROM northwind.orders GROUP BY EmployeeID ORDER BY EmployeeID LIMIT 1";
    assert_eq!(json(&engine, grouped).await, serde_json::json!([{"EmployeeID": 1, "s": null}]));
    // Values that are no numbers are not nulls: their sum stays 0 (SQLite's too).
    let text = "SELECT SUM(CustomerID) AS s FROM northwind.orders";
    assert_eq!(json(&engine, text).await, serde_json::json!([{"s": 0}]));
    assert_eq!(sqlite_rows(&conn, text), vec![vec![Cell::Number(0.0)]]);
    // Comparisons are strict about type, as Harper's indexed search is: a numeric
    // string is not the number (SQLite converts it for an INTEGER column).
    let rows = json(&engine, "SELECT OrderID FROM northwind.orders WHERE OrderID = '10300'").await;
    assert_eq!(rows, serde_json::json!([]));
    assert_eq!(sqlite_rows(&conn, "SELECT OrderID FROM northwind.orders WHERE OrderID = '10300'").len(), 1);
    // Double quotes make a string, backticks a name (MySQL's and Harper's rule).
    let rows = json(&engine, "SELECT `RegionID` FROM northwind.region WHERE RegionDescription = \"Eastern\"").await;
    assert_eq!(rows, serde_json::json!([{"RegionID": 1}]));
}

/// Result columns are named as Harper names them.
#[tokio::test]
async fn columns_are_named_as_harper_names_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset();
    let engine = lyre(dir.path(), &data).await;
    let rows = json(
        &engine,
        "SELECT count(*), COUNT(DISTINCT r.RegionID), MAX(r.RegionID), upper(RegionDescription), CONCAT(RegionDescription, ' - ', 'x'), r.RegionDescription, RegionID AS id FROM northwind.region r GROUP BY RegionDescription ORDER BY id LIMIT 1",
    )
    .await;
    let keys: Vec<&str> = rows[0].as_object().expect("a row").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "COUNT(*)",
            "COUNT(r.RegionID)",
            "MAX(r.RegionID)",
            "UPPER(RegionDescription)",
            "CONCAT(RegionDescription,\" - \",\"x\")",
            "RegionDescription",
            "id"
        ]
    );
    // A join's `*` numbers the names a later table repeats.
    let rows = json(&engine, "SELECT * FROM northwind.territories t JOIN northwind.region r ON r.RegionID = t.RegionID WHERE t.TerritoryID = '01000'").await;
    let keys: Vec<&str> = rows[0].as_object().expect("a row").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "TerritoryID",
            "__createdtime__",
            "__updatedtime__",
            "TerritoryDescription",
            "RegionID",
            "RegionID1",
            "__createdtime__1",
            "__updatedtime__1",
            "RegionDescription"
        ]
    );
}

/// A join that needs only the inner table's join key reads it from the index
/// (core builds those records from index entries), but only where the index key
/// holds the value exactly: a string longer than a key keeps, a zero (maybe a
/// negative one) and an integer past 2^53 (maybe a float: `1e17` is written as
/// one) are read from their records, so the joined values are the stored ones.
#[tokio::test]
async fn an_index_only_join_answers_the_stored_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = lyre(dir.path(), &[]).await;
    let db = engine.database("northwind").expect("database");
    let ctx = Context::system();
    let long = "x".repeat(400);
    let keys = serde_json::json!([
        long.clone(),
        format!("{long}y"),
        9_007_199_254_740_993_i64,
        9_007_199_254_740_992_i64,
        -0.0,
        0,
        1e17,
        1.5,
        7,
        "short",
        true,
        null
    ]);
    let records = |offset: usize| -> Vec<Object> {
        keys.as_array()
            .expect("keys")
            .iter()
            .enumerate()
            .map(|(i, k)| serde_json::from_value(serde_json::json!({"id": i + offset, "k": k})).expect("record"))
            .collect()
    };
    for (name, rows) in [("outer_keys", records(0)), ("inner_keys", records(100))] {
        db.create_table(&ctx, TableSpec::dynamic(name, "id")).await.expect("table");
        db.table(name).expect("table").insert(&ctx, rows).await.expect("rows");
    }
    let sorted = |rows: serde_json::Value| {
        let mut texts: Vec<String> = rows.as_array().expect("rows").iter().map(|r| r["k"].to_string()).collect();
        texts.sort();
        texts
    };
    let joined =
        json(&engine, "SELECT i.k AS k FROM northwind.outer_keys o INNER JOIN northwind.inner_keys i ON i.k = o.k")
            .await;
    // Each outer key finds its own record (and 0 and -0, one key, find each other).
    let stored = json(
        &engine,
        "SELECT i.k AS k FROM northwind.outer_keys o INNER JOIN northwind.inner_keys i ON i.id = o.id + 100",
    )
    .await;
    let zeros = json(&engine, "SELECT k FROM northwind.inner_keys WHERE id IN (104, 105)").await;
    let mut expected = sorted(stored);
    expected.extend(sorted(zeros));
    expected.retain(|k| k != "null");
    expected.sort();
    assert_eq!(sorted(joined), expected);
    let explain = "EXPLAIN SELECT i.k FROM northwind.outer_keys o INNER JOIN northwind.inner_keys i ON i.k = o.k";
    let plan = lyre_sql::execute(engine.clone(), Context::system(), explain, lyre_sql::DEFAULT_MEMORY_BUDGET).await;
    assert!(
        matches!(&plan, Ok(Outcome::Plan(steps)) if steps.iter().any(|s| s == "i: lookup by k for each row")),
        "{plan:?}"
    );
}
