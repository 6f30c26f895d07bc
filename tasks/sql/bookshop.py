"""The bookshop database: authors, books, customers, orders and their line items."""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.questions import Cat, Entity, Num, hard, medium, more_than, most

SCHEMA = """
CREATE TABLE authors (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT, birth_year INTEGER
);
CREATE TABLE books (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, author_id INTEGER REFERENCES authors(id),
    genre TEXT, price REAL, pages INTEGER, published_year INTEGER
);
CREATE TABLE customers (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, city TEXT, joined_date TEXT
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
    order_date TEXT, status TEXT
);
CREATE TABLE order_items (
    id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
    book_id INTEGER REFERENCES books(id), quantity INTEGER, unit_price REAL
);
"""

GENRES = (
    "Fantasy", "Mystery", "Romance", "Science Fiction", "History", "Biography", "Poetry",
    "Thriller", "Children", "Cooking",
)  # fmt: skip
STATUSES = {"delivered": 60, "shipped": 20, "pending": 10, "cancelled": 10}


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. ~15 authors have no books, every
    25th book was never ordered, and some customers never ordered."""
    authors = [
        (i, name, rng.choice(words.COUNTRIES), rng.randint(1930, 1995))
        for i, name in enumerate(words.distinct(rng, words.person, 150), start=1)
    ]
    books = []
    for i, title in enumerate(words.distinct(rng, words.title, 700), start=1):
        price = words.money(rng, 5, 45)
        year = min(2024, int(rng.triangular(1950, 2025, 2018)))
        books.append((i, title, rng.randint(1, 135), rng.choice(GENRES), price,
                      rng.randint(8, 90) * 10, year))  # fmt: skip
    customers = []
    for i in range(1, 901):
        name = words.person(rng)
        email = f"{name.lower().replace(' ', '.')}{i}@example.com"
        city = rng.choice(words.CITIES)[0]
        customers.append((i, name, email, city, words.date(rng, 2018, 2023)))
    orders = [
        (i, rng.randint(1, 860), words.date(rng, 2021, 2024), words.weighted(rng, STATUSES))
        for i in range(1, 2601)
    ]
    sold = [b for b in books if b[0] % 25]
    items: list[tuple] = []
    for order_id, *_ in orders:
        for book in rng.sample(sold, rng.choice((1, 1, 2, 2, 3, 4))):
            items.append((len(items) + 1, order_id, book[0], rng.choice((1, 1, 1, 2, 3)), book[4]))
    return {"authors": authors, "books": books, "customers": customers, "orders": orders,
            "order_items": items}  # fmt: skip


ENTITIES = (
    Entity("authors", "author", "authors", "name", rel="who",
           cats=(Cat("country", "country", "countries", "come from {v}"),),
           nums=(Num("birth_year", "birth year"),)),
    Entity("books", "book", "books", "title", "titles", quoted=True,
           cats=(Cat("genre", "genre", "genres", "belong to the {v} genre"),),
           nums=(Num("price", "price"), Num("pages", "page count"),
                 Num("published_year", "publication year"))),
    Entity("customers", "customer", "customers", "name", rel="who",
           cats=(Cat("city", "city", "cities", "live in {v}"),)),
    Entity("orders", "order", "orders",
           cats=(Cat("status", "status", "statuses", "have the status '{v}'"),)),
    Entity("order_items", "order item", "order items",
           nums=(Num("quantity", "quantity", total=True),)),
)  # fmt: skip

_BY_AUTHOR = "FROM books JOIN authors ON books.author_id = authors.id"
_AUTHORS = f"SELECT DISTINCT authors.name {_BY_AUTHOR}"
_TITLES = "SELECT title FROM books GROUP BY title HAVING COUNT(*) = 1"
_CUSTOMERS = (
    "SELECT customers.name FROM customers JOIN orders ON orders.customer_id = customers.id "
    "GROUP BY customers.name HAVING COUNT(DISTINCT customers.id) = 1"
)
_SALES = "FROM books JOIN order_items ON order_items.book_id = books.id"

TEMPLATES = (
    medium("How many books were written by {a}?",
           f"SELECT COUNT(*) {_BY_AUTHOR} WHERE authors.name = '{{a}}'", a=_AUTHORS),
    medium("What are the titles of the books written by {a}?",
           f"SELECT books.title {_BY_AUTHOR} WHERE authors.name = '{{a}}'", a=_AUTHORS),
    medium("Who wrote the book '{b}'?",
           f"SELECT authors.name {_BY_AUTHOR} WHERE books.title = '{{b}}'", b=_TITLES),
    medium("How many books were written by authors from {c}?",
           f"SELECT COUNT(*) {_BY_AUTHOR} WHERE authors.country = '{{c}}'",
           c="SELECT DISTINCT country FROM authors"),
    medium("What is the average price of the books written by {a}?",
           f"SELECT AVG(books.price) {_BY_AUTHOR} WHERE authors.name = '{{a}}'", a=_AUTHORS),
    most("Which author has written the most books?", "authors.name", _BY_AUTHOR, "books.author_id"),
    medium("How many orders has the customer {c} placed?",
           "SELECT COUNT(*) FROM orders JOIN customers ON orders.customer_id = customers.id "
           "WHERE customers.name = '{c}'", c=_CUSTOMERS),
    medium("How many orders were placed in {y}?",
           "SELECT COUNT(*) FROM orders WHERE strftime('%Y', order_date) = '{y}'",
           y=("2021", "2022", "2023", "2024")),
    medium("How many orders were placed by customers who live in {c}?",
           "SELECT COUNT(*) FROM orders JOIN customers ON orders.customer_id = customers.id "
           "WHERE customers.city = '{c}'", c="SELECT DISTINCT city FROM customers"),
    medium("How many copies of the book '{b}' have been sold?",
           f"SELECT SUM(order_items.quantity) {_SALES} WHERE books.title = '{{b}}'", b=_TITLES),
    more_than("Which authors have written more than {k} books?", "authors.name", _BY_AUTHOR,
              "books.author_id"),
    hard("Which authors have not written any books?",
         "SELECT name FROM authors WHERE id NOT IN (SELECT author_id FROM books)"),
    hard("Which books have never been ordered?",
         "SELECT title FROM books WHERE id NOT IN (SELECT book_id FROM order_items)"),
    hard("How many customers have never placed an order?",
         "SELECT COUNT(*) FROM customers WHERE id NOT IN (SELECT customer_id FROM orders)"),
    hard("What is the total amount spent by the customer {c}?",
         "SELECT SUM(order_items.quantity * order_items.unit_price) FROM customers "
         "JOIN orders ON orders.customer_id = customers.id "
         "JOIN order_items ON order_items.order_id = orders.id WHERE customers.name = '{c}'",
         c=_CUSTOMERS),
    hard("What are the titles of the {k} best-selling books by total quantity sold?",
         f"SELECT books.title {_SALES} GROUP BY books.id, books.title ORDER BY SUM(order_items.quantity) DESC "
         "LIMIT {k}",
         keys="SELECT SUM(quantity) FROM order_items GROUP BY book_id ORDER BY 1 DESC", k=(3, 5)),
    hard("What are the names of the customers who bought the book '{b}'?",
         "SELECT DISTINCT customers.name FROM customers "
         "JOIN orders ON orders.customer_id = customers.id "
         "JOIN order_items ON order_items.order_id = orders.id "
         "JOIN books ON order_items.book_id = books.id WHERE books.title = '{b}'", b=_TITLES),
    hard("Which genre has brought in the most revenue?",
         f"SELECT books.genre {_SALES} GROUP BY books.genre "
         "ORDER BY SUM(order_items.quantity * order_items.unit_price) DESC LIMIT 1",
         keys=f"SELECT SUM(order_items.quantity * order_items.unit_price) {_SALES} "
         "GROUP BY books.genre ORDER BY 1 DESC"),
    hard("Which customers who live in {c} have placed more than {k} orders?",
         "SELECT customers.name FROM customers JOIN orders ON orders.customer_id = customers.id "
         "WHERE customers.city = '{c}' GROUP BY customers.id, customers.name HAVING COUNT(*) > {k}",
         c="SELECT DISTINCT city FROM customers", k=(2, 3, 4, 5)),
    hard("What are the titles of the {g} books that cost more than the average price of "
         "{g} books?",
         "SELECT title FROM books WHERE genre = '{g}' AND price > "
         "(SELECT AVG(price) FROM books WHERE genre = '{g}')",
         g="SELECT DISTINCT genre FROM books"),
)  # fmt: skip
