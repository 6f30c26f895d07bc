def main():
    print("app")
